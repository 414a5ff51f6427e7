"""Settings of the reference project: only CommonMiddleware, no authentication, no product code."""

import os
import secrets
from urllib.parse import unquote, urlsplit

_database = urlsplit(os.environ["DATABASE_URL"])

SECRET_KEY = os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50)  # nothing here is signed
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
ROOT_URLCONF = "bench.reference.urls"
WSGI_APPLICATION = "bench.reference.wsgi.application"
INSTALLED_APPS: list[str] = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
USE_TZ = True
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.path.lstrip("/"),
        "USER": unquote(_database.username or ""),
        "PASSWORD": unquote(_database.password or ""),
        "HOST": _database.hostname or "",
        "PORT": str(_database.port or ""),
        "CONN_MAX_AGE": 60,  # persistent connections, as the product is deployed
    }
}
REDIS_URL = os.environ["REDIS_URL"]
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [],
    "DEFAULT_PERMISSION_CLASSES": [],
    "UNAUTHENTICATED_USER": None,
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
}

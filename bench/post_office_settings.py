"""Throwaway Django settings for the dispatch scenario's peer, django-post-office.

Its own project (only post_office and what it needs), on its own database (POST_OFFICE_DATABASE_URL,
created and dropped by the scenario), sending with Django's SMTP backend to the bench sink
(POST_OFFICE_SMTP_PORT). Never part of the product's INSTALLED_APPS. post_office runs with its
defaults (batch size, threads per process, logging), as a Django user would get it.
"""

import os
from urllib.parse import urlsplit

_database = urlsplit(os.environ["POST_OFFICE_DATABASE_URL"])

SECRET_KEY = "bench-post-office-only"  # noqa: S105 - a throwaway project on loopback
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "post_office"]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _database.path.lstrip("/"),
        "USER": _database.username or "",
        "PASSWORD": _database.password or "",
        "HOST": _database.hostname or "",
        "PORT": _database.port or "",
    }
}
# post_office renders every subject and body as a Django template (a plain string renders as itself).
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True}]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
EMAIL_BACKEND = "post_office.EmailBackend"
POST_OFFICE = {"BACKENDS": {"default": "django.core.mail.backends.smtp.EmailBackend"}}
EMAIL_HOST = "127.0.0.1"
EMAIL_PORT = int(os.environ["POST_OFFICE_SMTP_PORT"])

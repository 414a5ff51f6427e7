"""Django's and its libraries' settings that no environment changes: the apps, the request layers, the
console's Content-Security-Policy, templates, DRF and the OpenAPI document. config/settings.py imports them
and reads everything that varies from the environment."""

from csp.constants import NONCE, NONE, SELF, UNSAFE_INLINE

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",  # before mailservice: mailservice/admin.py re-registers its admin pages
    "mailservice",
    "domains",
    "apikeys",
    "templates_app",
    "messaging",
    "webhooks",
]

# Every request passes through the first five; the console's layers, between ConsoleLayers and
# ConsoleLayersEnd, run for every path but /v1/ (docs/architecture.md, "One request, two paths").
MIDDLEWARE = [
    "mailservice.api.middleware.RequestIdMiddleware",
    "mailservice.api.middleware.ApiErrorMiddleware",
    "django.middleware.security.SecurityMiddleware",  # before the rate limit: its 429 and 413 carry the headers too
    "mailservice.api.middleware.RateLimitMiddleware",
    "django.middleware.common.CommonMiddleware",
    "mailservice.api.middleware.ConsoleLayers",
    "csp.middleware.CSPMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",  # last of the console's layers, as django-axes requires
    "mailservice.api.middleware.ConsoleLayersEnd",
]

# --- Content-Security-Policy (django-csp) on every console page: nothing loads from elsewhere. The
# console's own inline script carries the request's nonce; inline style attributes are allowed (the
# admin's templates use them). Previews of mail HTML add their own, stricter policy (mailservice/console.py).
CONTENT_SECURITY_POLICY = {
    "EXCLUDE_URL_PREFIXES": ["/docs/"],  # Swagger UI's page runs inline scripts
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF, NONCE],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "frame-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "form-action": [SELF],
        "frame-ancestors": [NONE],
    },
}

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
FORMAT_MODULE_PATH = ["config.formats"]

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["mailservice.api.authentication.BearerKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["mailservice.api.parsers.BoundedJSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_CONTENT_NEGOTIATION_CLASS": "mailservice.api.negotiation.JsonOnlyNegotiation",
    "DEFAULT_SCHEMA_CLASS": "mailservice.api.openapi.ApiSchema",
    # OPTIONS is not an operation of the API: it answers 405 like any other undocumented method.
    "DEFAULT_METADATA_CLASS": None,
    "EXCEPTION_HANDLER": "mailservice.api.exceptions.api_exception_handler",
    "UNAUTHENTICATED_USER": None,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Mail service API",
    "DESCRIPTION": "Send email from a verified domain and read its retained messages.",
    "VERSION": "0.1.0",
    "OAS_VERSION": "3.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    # Swagger UI would otherwise send the document's URL to validator.swagger.io: /docs/ stays offline.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "REDOC_DIST": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "mailservice.api.openapi.add_webhook_components",
        "mailservice.api.openapi.close_object_schemas",
    ],
    "APPEND_COMPONENTS": {
        "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer", "description": "A domain API key"}}
    },
    "SECURITY": [{"bearerAuth": []}],
    "AUTHENTICATION_WHITELIST": [],
    # One per event type (docs/webhooks.md).
    "WEBHOOKS": [
        f"mailservice.api.webhook_schemas.EMAIL_{name}"
        for name in ("ACCEPTED", "DELIVERED", "DELAYED", "BOUNCED", "COMPLAINED", "FAILED", "SUPPRESSED", "RECEIVED")
    ]
    + ["mailservice.api.webhook_schemas.DOMAIN_DMARC_REPORT"],
}

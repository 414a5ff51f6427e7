"""Settings for every environment. Everything that varies is read from the environment here.

Development defaults (SQLite under var/, local-memory cache, in-process dispatch, file outbox)
make the first run work with no configuration; production sets DEBUG=false and must then
provide SECRET_KEY (there is no default secret).
"""

import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.env import database_from_url, env_bool, env_float, env_int, env_list, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("MAILSERVICE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)


def _development_secret_key() -> str:
    """A random per-checkout key kept in var/, so development needs no SECRET_KEY."""
    path = VAR_DIR / "secret_key"
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env_str("SECRET_KEY") or (_development_secret_key() if DEBUG else None)
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])

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
    "mailservice",
    "domains",
    "apikeys",
    "templates_app",
    "messaging",
]

MIDDLEWARE = [
    "mailservice.api.middleware.RequestIdMiddleware",
    "mailservice.api.middleware.ApiErrorMiddleware",
    "mailservice.api.middleware.RateLimitMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

# Bench-only: `make bench` points this at bench.ceiling_urls to measure the framework ceiling
# on the same server stack. Production never sets it.
ROOT_URLCONF = env_str("BENCH_ROOT_URLCONF", "config.urls")
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"
APPEND_SLASH = False

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

DATABASES = {
    "default": database_from_url(env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'mailservice.sqlite3'}"), BASE_DIR)
}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves the console's and the docs page's assets straight from the installed
# apps (no collectstatic step, no CDN, no extra web server).
WHITENOISE_USE_FINDERS = True

# Production hardening; `manage.py check --deploy` passes with DEBUG=false behind TLS.
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if env_list("MAILSERVICE_TRUSTED_PROXIES", []) else None
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# The largest request that meets every field limit, fully \u-escaped (12 bytes per
# astral character), is about 3.9 MB; anything past 4 MiB gets 413.
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["mailservice.api.authentication.BearerKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
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
    "POSTPROCESSING_HOOKS": ["mailservice.api.openapi.close_object_schemas"],
    "APPEND_COMPONENTS": {
        "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer", "description": "A domain API key"}}
    },
    "SECURITY": [{"bearerAuth": []}],
    "AUTHENTICATION_WHITELIST": [],
}

# --- The mail service itself ---------------------------------------------------------
MAILSERVICE_RATE_LIMIT = env_str("MAILSERVICE_RATE_LIMIT", "120/m")
MAILSERVICE_TRUSTED_PROXIES = env_list("MAILSERVICE_TRUSTED_PROXIES", [])
EMAIL_URL = env_str("EMAIL_URL")
MAILSERVICE_OUTBOX_DIR = VAR_DIR / "outbox"
MAILSERVICE_RETURN_PATH_DOMAIN = env_str("MAILSERVICE_RETURN_PATH_DOMAIN")

# Inbound SMTP (manage.py run_inbound_smtp): the size cap is advertised with the SIZE extension.
MAILSERVICE_INBOUND_MAX_BYTES = env_int("MAILSERVICE_INBOUND_MAX_BYTES", 25 * 1024 * 1024)
# How long a recipient found on a verified domain is accepted at RCPT without asking the database
# again; whether the domain is still verified is checked anyway when its mail is stored.
MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS = env_float("MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS", 5.0)

# Safeguards: a domain is paused when, over its most recent sends (at most WINDOW_SENDS, none older
# than WINDOW_HOURS), the bounce or complaint rate is over the limit. Below MIN_SENDS sends in the
# window nothing is paused, so one early bounce cannot stop a new domain.
MAILSERVICE_SAFEGUARD_WINDOW_SENDS = env_int("MAILSERVICE_SAFEGUARD_WINDOW_SENDS", 500)
MAILSERVICE_SAFEGUARD_WINDOW_HOURS = env_int("MAILSERVICE_SAFEGUARD_WINDOW_HOURS", 24)
MAILSERVICE_SAFEGUARD_MIN_SENDS = env_int("MAILSERVICE_SAFEGUARD_MIN_SENDS", 20)
MAILSERVICE_BOUNCE_RATE_LIMIT = env_float("MAILSERVICE_BOUNCE_RATE_LIMIT", 0.05)
MAILSERVICE_COMPLAINT_RATE_LIMIT = env_float("MAILSERVICE_COMPLAINT_RATE_LIMIT", 0.001)

# --- DNS records the console tells operators to publish, and the "Check DNS" lookups -----
# SPF: `v=spf1 include:<MAILSERVICE_SPF_INCLUDE> ~all` (the record is not shown while unset).
MAILSERVICE_SPF_INCLUDE = env_str("MAILSERVICE_SPF_INCLUDE")
# The inbound server's public name: the MX of the return-path domain (or of the sending
# domain) and the name in its SMTP banner (default: this machine's FQDN).
MAILSERVICE_INBOUND_HOST = env_str("MAILSERVICE_INBOUND_HOST")
# "host" or "host:port" of the resolver to ask; unset means the system's resolvers.
MAILSERVICE_DNS_RESOLVER = env_str("MAILSERVICE_DNS_RESOLVER")
MAILSERVICE_DNS_TIMEOUT = env_float("MAILSERVICE_DNS_TIMEOUT", 5.0)
# Bounce and complaint rates in the console cover sent messages of this many recent days.
MAILSERVICE_RATE_WINDOW_DAYS = env_int("MAILSERVICE_RATE_WINDOW_DAYS", 30)

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", REDIS_URL)
# Without a broker (the embedded default) tasks run in-process once the send has committed.
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes the database connection before and after every task unless this is
# set; config/celery.py applies CONN_MAX_AGE around tasks instead, as Django does around requests.
CELERY_DB_REUSE_MAX = 2**31

# --- Dispatch (messaging/dispatch.py) -------------------------------------------------------
# Attempt n failing temporarily waits BASE * 2^(n-1) seconds
# (at most BACKOFF_MAX) plus up to JITTER of that; the defaults try 6 times over about 62 minutes.
MAILSERVICE_DISPATCH_MAX_ATTEMPTS = env_int("MAILSERVICE_DISPATCH_MAX_ATTEMPTS", 6)
MAILSERVICE_DISPATCH_BACKOFF_BASE = env_float("MAILSERVICE_DISPATCH_BACKOFF_BASE", 120.0)
MAILSERVICE_DISPATCH_BACKOFF_MAX = env_float("MAILSERVICE_DISPATCH_BACKOFF_MAX", 3600.0)
MAILSERVICE_DISPATCH_BACKOFF_JITTER = env_float("MAILSERVICE_DISPATCH_BACKOFF_JITTER", 0.2)
# A claimed message is the worker's until the lease runs out (renewed right before SMTP), so it
# must outlast one SMTP conversation: well above MAILSERVICE_SMTP_TIMEOUT.
MAILSERVICE_DISPATCH_LEASE_SECONDS = env_float("MAILSERVICE_DISPATCH_LEASE_SECONDS", 300.0)
MAILSERVICE_DISPATCH_BATCH_SIZE = env_int("MAILSERVICE_DISPATCH_BATCH_SIZE", 20)
# The sweeper runs every SWEEP_INTERVAL seconds; a first attempt counts as lost (re-enqueued)
# once no worker has claimed it for SWEEP_GRACE seconds.
MAILSERVICE_DISPATCH_SWEEP_INTERVAL = env_float("MAILSERVICE_DISPATCH_SWEEP_INTERVAL", 30.0)
MAILSERVICE_DISPATCH_SWEEP_GRACE = env_float("MAILSERVICE_DISPATCH_SWEEP_GRACE", 60.0)
MAILSERVICE_DISPATCH_SWEEP_LIMIT = env_int("MAILSERVICE_DISPATCH_SWEEP_LIMIT", 10000)
MAILSERVICE_SMTP_TIMEOUT = env_float("MAILSERVICE_SMTP_TIMEOUT", 30.0)
MAILSERVICE_SMTP_POOL_SIZE = env_int("MAILSERVICE_SMTP_POOL_SIZE", 8)  # one per worker thread (Procfile)
# --- Delivery control (messaging/fairness.py, messaging/relay_limits.py) -----------------------
# The relay's limits, shared by every worker through Redis (in-process without REDIS_URL).
# RATE: messages per second for the whole fleet (unset: unlimited); CONNECTIONS: open relay
# connections at once (unset: no cap). A "slow down" answer halves the effective rate; it climbs
# back by RATE_STEP messages/s each second without one, and never falls below RATE_FLOOR.
MAILSERVICE_RELAY_RATE = env_float("MAILSERVICE_RELAY_RATE", 0.0) or None
MAILSERVICE_RELAY_CONNECTIONS = env_int("MAILSERVICE_RELAY_CONNECTIONS", 0) or None
MAILSERVICE_RELAY_RATE_STEP = env_float("MAILSERVICE_RELAY_RATE_STEP", 2.0)
MAILSERVICE_RELAY_RATE_FLOOR = env_float("MAILSERVICE_RELAY_RATE_FLOOR", 1.0)
# A recipient domain the relay answers a temporary failure for waits BASE * 2^(n-1) seconds
# (at most MAX) after its n-th such answer in a row; its messages wait as a group meanwhile.
MAILSERVICE_DESTINATION_BACKOFF_BASE = env_float("MAILSERVICE_DESTINATION_BACKOFF_BASE", 30.0)
MAILSERVICE_DESTINATION_BACKOFF_MAX = env_float("MAILSERVICE_DESTINATION_BACKOFF_MAX", 1800.0)
# Tests give each web/worker pair a queue of its own.
CELERY_TASK_DEFAULT_QUEUE = env_str("CELERY_TASK_DEFAULT_QUEUE", "celery")
# An unacknowledged task (its worker died) is redelivered after this many seconds; the
# dispatch claim makes a redelivery of a finished or running task a no-op.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600)}
CELERY_BEAT_SCHEDULE = {
    # A sweep still queued when the next one is due is dropped rather than run late.
    "dispatch-sweep": {
        "task": "messaging.dispatch_sweep",
        "schedule": MAILSERVICE_DISPATCH_SWEEP_INTERVAL,
        "options": {"expires": MAILSERVICE_DISPATCH_SWEEP_INTERVAL},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # aiosmtpd traces every SMTP command at INFO; the inbound server logs what it decides itself.
    "loggers": {"django.request": {"level": "ERROR"}, "mail.log": {"level": env_str("SMTP_LOG_LEVEL", "WARNING")}},
}

"""Settings for every environment. Everything that varies is read from the environment here.

Development defaults (SQLite under var/, local-memory cache, in-process dispatch, file outbox)
make the first run work with no configuration; production sets DEBUG=false and must then
provide SECRET_KEY (there is no default secret).
"""

import secrets
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from celery.schedules import crontab
from cryptography.fernet import Fernet
from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from config.env import (
    BROKER_SCHEMES,
    LOG_LEVELS,
    POOLERS,
    REDIS_SCHEMES,
    database_behind_pooler,
    database_from_url,
    env_address,
    env_bool,
    env_choice,
    env_fernet_keys,
    env_float,
    env_host,
    env_host_port,
    env_int,
    env_list,
    env_networks,
    env_rate,
    env_source_addresses,
    env_str,
    env_url,
)
from config.framework import (  # noqa: F401
    CONTENT_SECURITY_POLICY,
    FORMAT_MODULE_PATH,
    INSTALLED_APPS,
    LANGUAGE_CODE,
    MIDDLEWARE,
    REST_FRAMEWORK,
    SPECTACULAR_SETTINGS,
    TEMPLATES,
    TIME_ZONE,
    USE_I18N,
    USE_TZ,
)

BASE_DIR = Path(__file__).resolve().parent.parent
# KEY=value lines for whatever the real environment does not set: `make run` writes a development
# .env, so `.venv/bin/python manage.py …`, `make worker` and honcho use the same settings. The test
# settings point this at /dev/null, so a checkout's .env never leaks into the suite.
load_dotenv(env_str("MAILSERVICE_ENV_FILE", str(BASE_DIR / ".env")), override=False)
VAR_DIR = Path(env_str("MAILSERVICE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)


def _development_secret(filename: str, generate: Callable[[], str]) -> str:
    """A random per-checkout secret kept in var/, so development needs no configuration."""
    path = VAR_DIR / filename
    if not path.exists():
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        path.write_text(generate())
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = env_str("SECRET_KEY") or (
    _development_secret("secret_key", lambda: secrets.token_urlsafe(50)) if DEBUG else None
)
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")

# Secrets at rest (DKIM private keys) are encrypted with the first key and decrypted with any of
# them (MultiFernet), so a new key is added first, `manage.py reencrypt_secrets` run, the old one
# dropped. Production without keys fails `check --deploy` and the worker refuses to start.
# Development keeps a generated key in var/encryption_key: losing that file loses the stored DKIM
# keys (rotate them then).
MAILSERVICE_ENCRYPTION_KEYS = env_fernet_keys("MAILSERVICE_ENCRYPTION_KEYS") or (
    [_development_secret("encryption_key", lambda: Fernet.generate_key().decode())] if DEBUG else []
)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])

# --- The console's login: throttled per user name, from whatever addresses (django-axes) ---
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
AXES_FAILURE_LIMIT = env_int("MAILSERVICE_LOGIN_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_float("MAILSERVICE_LOGIN_LOCKOUT_MINUTES", 15))
# Per user name from any mix of addresses (counted per (user name, address) alone, 8 addresses had 5
# guesses each), and per (user name, address) as before. One failure limit applies to both, so the pair
# locks no sooner; it is listed because axes' deploy check (W006) wants the address in the parameters.
# Not per address alone: one attacker would lock out every operator behind the same proxy.
AXES_LOCKOUT_PARAMETERS = ["username", ["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "mailservice.api.clientip.client_ip"  # MAILSERVICE_TRUSTED_PROXIES decides, as for the API
AXES_LOCKOUT_TEMPLATE = "admin/mailservice/locked_out.html"

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"
APPEND_SLASH = False

DATABASES = {
    "default": database_from_url(env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'mailservice.sqlite3'}"), BASE_DIR)
}
DATABASES["default"]["CONN_MAX_AGE"] = env_int("DATABASE_CONN_MAX_AGE", 60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Behind a transaction-pooling PgBouncer: no session state (config/env.py). LISTEN is session state too:
# the dispatch loop listens on DATABASE_DIRECT_URL, straight to PostgreSQL, or else polls.
DATABASE_POOLER = env_choice("DATABASE_POOLER", "none", POOLERS)
DATABASES["default"] = database_behind_pooler(DATABASES["default"], DATABASE_POOLER)
DATABASE_DIRECT_URL = env_url("DATABASE_DIRECT_URL", ("postgres", "postgresql"))
DATABASE_LISTEN = database_from_url(DATABASE_DIRECT_URL, BASE_DIR) if DATABASE_DIRECT_URL else None
# A PostgreSQL with fsync or synchronous_commit off fails /readyz and the dispatch worker refuses to start
# (mailservice/durability.py): a crash there could lose accepted mail. True accepts that (a test cluster).
MAILSERVICE_ALLOW_UNSAFE_DURABILITY = env_bool("MAILSERVICE_ALLOW_UNSAFE_DURABILITY", False)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = env_url("REDIS_URL", REDIS_SCHEMES)
if REDIS_URL:
    CACHES = {"default": {"BACKEND": "mailservice.redis_pool.ProcessRedisCache", "LOCATION": REDIS_URL}}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
# WhiteNoise serves the console's and the docs page's assets straight from the installed
# apps (no collectstatic step, no CDN, no extra web server).
WHITENOISE_USE_FINDERS = True

# Production hardening; `manage.py check --deploy` passes with DEBUG=false behind TLS.
MAILSERVICE_TRUSTED_PROXIES = env_networks("MAILSERVICE_TRUSTED_PROXIES")
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if MAILSERVICE_TRUSTED_PROXIES else None
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
# POST /v1/send/batch: how many messages one request may carry, and its own body limit (the 4 MiB
# above is one send's). 40 MiB holds 100 messages at the largest inline bodies, or 500 at 80 KB each.
MAILSERVICE_BATCH_MAX = env_int("MAILSERVICE_BATCH_MAX", 500)
MAILSERVICE_BATCH_MAX_BYTES = env_int("MAILSERVICE_BATCH_MAX_BYTES", 40 * 1024 * 1024)

# --- The mail service itself ---------------------------------------------------------
MAILSERVICE_RATE_LIMIT = env_rate("MAILSERVICE_RATE_LIMIT", "120/m")
# django-ratelimit answers "limited" when it cannot read its counter: with Redis down, and also when
# a window's key expires between its add and its incr (the purge benchmark saw 10 such 429s in
# 7 500 requests). A counter outage lets requests through instead, as docs/operating.md says.
RATELIMIT_FAIL_OPEN = True
# How long a web process may reuse an API key it looked up (apikeys/cache.py): a change to a key or
# its domain applies at once through the version in Redis; this bounds it should that version fail.
MAILSERVICE_API_KEY_CACHE_SECONDS = env_float("MAILSERVICE_API_KEY_CACHE_SECONDS", 10.0)
EMAIL_URL = env_str("EMAIL_URL")
MAILSERVICE_OUTBOX_DIR = VAR_DIR / "outbox"
MAILSERVICE_RETURN_PATH_DOMAIN = env_host("MAILSERVICE_RETURN_PATH_DOMAIN")

# Inbound SMTP (manage.py run_inbound_smtp): the size cap is advertised with the SIZE extension.
MAILSERVICE_INBOUND_MAX_BYTES = env_int("MAILSERVICE_INBOUND_MAX_BYTES", 25 * 1024 * 1024)
# How long a recipient found on a verified domain is accepted at RCPT without asking the database
# again; whether the domain is still verified is checked anyway when its mail is stored.
MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS = env_float("MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS", 5.0)
# Messages received, parsed and stored at once (each a worker thread); the others wait before their
# DATA is read, so peak memory is bounded by WORKERS x INBOUND_MAX_BYTES (docs/inbound.md).
MAILSERVICE_INBOUND_WORKERS = env_int("MAILSERVICE_INBOUND_WORKERS", 4)
# Parsing budget per message: a message that takes longer is stored raw, marked unparsed.
MAILSERVICE_INBOUND_PARSE_SECONDS = env_float("MAILSERVICE_INBOUND_PARSE_SECONDS", 5.0)
# DMARC aggregate and TLS reports (dmarc-reports@ and tls-reports@ the return-path domain): the most
# a report's attachment may expand to (gzip or zip); decompression stops there and the mail is kept
# as received mail with the reason.
MAILSERVICE_REPORT_MAX_BYTES = env_int("MAILSERVICE_REPORT_MAX_BYTES", 20 * 1024 * 1024)
# The most records a DMARC report may hold; reading stops at the first past it and the mail is kept
# with the reason. Reporters write one record per source address and result set: the largest real
# report we have (parsedmarc's sample from a large reporter, 2,286 records) fits eight times over.
MAILSERVICE_REPORT_MAX_RECORDS = env_int("MAILSERVICE_REPORT_MAX_RECORDS", 20_000, minimum=1)
# The records a domain's DMARC reports may add in a UTC day; a report past it is kept as received mail
# with the reason. Ten of the largest reports a day: no outsider can turn mail into unbounded rows.
MAILSERVICE_REPORT_DAILY_ROWS = env_int("MAILSERVICE_REPORT_DAILY_ROWS", 200_000, minimum=1)
# A report whose period begins more than this many days ago (or ends more than a day ahead) is refused.
MAILSERVICE_REPORT_MAX_AGE_DAYS = env_int("MAILSERVICE_REPORT_MAX_AGE_DAYS", 60, minimum=1)
# Accept bounces to the unsigned VERP form `bounces+<id>@` (messages of the last 7 days only).
MAILSERVICE_VERP_ACCEPT_UNSIGNED = env_bool("MAILSERVICE_VERP_ACCEPT_UNSIGNED", True)
# TLS of the SMTP servers (STARTTLS on the inbound and submission servers, or implicit TLS with
# run_submission_smtp --implicit-tls): PEM files of the certificate chain and its key (mailservice/tls.py).
MAILSERVICE_TLS_CERT_FILE = env_str("MAILSERVICE_TLS_CERT_FILE")
MAILSERVICE_TLS_KEY_FILE = env_str("MAILSERVICE_TLS_KEY_FILE")
# Soft bounces (4.x.x after the relay gave up): this many to one address within WINDOW_DAYS
# suppress it for SUPPRESS_DAYS; hard bounces and complaints suppress for good.
MAILSERVICE_SOFT_BOUNCE_LIMIT = env_int("MAILSERVICE_SOFT_BOUNCE_LIMIT", 3)
MAILSERVICE_SOFT_BOUNCE_WINDOW_DAYS = env_int("MAILSERVICE_SOFT_BOUNCE_WINDOW_DAYS", 30)
MAILSERVICE_SOFT_BOUNCE_SUPPRESS_DAYS = env_int("MAILSERVICE_SOFT_BOUNCE_SUPPRESS_DAYS", 7)

# SMTP submission (manage.py run_submission_smtp): the size cap is advertised with SIZE. AUTH is
# refused before STARTTLS unless plaintext AUTH is allowed (loopback and development only).
MAILSERVICE_SUBMISSION_MAX_BYTES = env_int("MAILSERVICE_SUBMISSION_MAX_BYTES", 10 * 1024 * 1024)
MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH = env_bool("MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH", False)
# Open sessions one client address may hold on a server process; the next is answered 421 and closed.
MAILSERVICE_SUBMISSION_MAX_CONNECTIONS_PER_IP = env_int("MAILSERVICE_SUBMISSION_MAX_CONNECTIONS_PER_IP", 20)
# Failed AUTH per window ('10/15m'), counted in the cache (Redis: every server process) per client
# address and per API key (its prefix, the key the password names); at the limit AUTH gets 454 4.7.0
# until the window ends, even with the right key.
MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_IP = env_rate("MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_IP", "10/15m")
MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_KEY = env_rate("MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_KEY", "20/15m")

# Retention (messaging/retention.py): messages older than this many days (a domain's own
# setting, when it has one) are purged with their events every PURGE_INTERVAL seconds.
MAILSERVICE_RETENTION_DAYS = env_int("MAILSERVICE_RETENTION_DAYS", 30)
MAILSERVICE_RETENTION_PURGE_INTERVAL = env_float("MAILSERVICE_RETENTION_PURGE_INTERVAL", 3600.0)
MAILSERVICE_RETENTION_BATCH_SIZE = env_int("MAILSERVICE_RETENTION_BATCH_SIZE", 500)

# Safeguards: a domain is paused when, over its most recent sends (at most WINDOW_SENDS, none older
# than WINDOW_HOURS), the bounce or complaint rate is over the limit AND there is evidence: at least
# MIN_SENDS sends in the window and at least MIN_BOUNCES bounced (MIN_COMPLAINTS complained)
# messages, so one early bounce or one forged complaint cannot stop a domain (docs/inbound.md, Safeguards).
MAILSERVICE_SAFEGUARD_WINDOW_SENDS = env_int("MAILSERVICE_SAFEGUARD_WINDOW_SENDS", 500)
MAILSERVICE_SAFEGUARD_WINDOW_HOURS = env_int("MAILSERVICE_SAFEGUARD_WINDOW_HOURS", 24)
MAILSERVICE_SAFEGUARD_MIN_SENDS = env_int("MAILSERVICE_SAFEGUARD_MIN_SENDS", 100)
MAILSERVICE_SAFEGUARD_MIN_BOUNCES = env_int("MAILSERVICE_SAFEGUARD_MIN_BOUNCES", 5)
MAILSERVICE_SAFEGUARD_MIN_COMPLAINTS = env_int("MAILSERVICE_SAFEGUARD_MIN_COMPLAINTS", 3)
MAILSERVICE_BOUNCE_RATE_LIMIT = env_float("MAILSERVICE_BOUNCE_RATE_LIMIT", 0.05)
MAILSERVICE_COMPLAINT_RATE_LIMIT = env_float("MAILSERVICE_COMPLAINT_RATE_LIMIT", 0.001)
# A complaint counts toward the complaint-rate safeguard only from a feedback loop the operator trusts
# (messaging/inbound/feedback_loops.py): an ARF whose DKIM signature verifies for one of these domains (or a
# subdomain), or from one of MAILSERVICE_FBL_ADDRESSES. Each provider's reports are signed by its own domain:
MAILSERVICE_FBL_DOMAINS = env_list(
    "MAILSERVICE_FBL_DOMAINS",
    [
        # Yahoo and AOL CFL: sent from feedback@arf.mail.yahoo.com, DKIM-signed by arf.mail.yahoo.com
        # (https://senders.yahooinc.com/faqs/).
        "yahoo.com",
        # Microsoft JMRP (Outlook.com, Hotmail): forwarded from staff@hotmail.com
        # (http://postmaster.msn.com/Services.aspx; enrolment at https://postmaster.live.com/snds/JMRP.aspx).
        "hotmail.com",
        # The next three are the providers' own mail domains, whose feedback loops send from them (Comcast's
        # through Validity, https://postmaster.comcast.net; Mail.ru, https://postmaster.mail.ru; Yandex,
        # https://yandex.ru/support/postoffice); their pages were not reachable from here to confirm the d=.
        "comcast.net",
        "mail.ru",
        "yandex.ru",
    ],
)
MAILSERVICE_FBL_ADDRESSES = [address.lower() for address in env_list("MAILSERVICE_FBL_ADDRESSES", [])]
# `count`: other complaints count toward the safeguard too; anything else (default `ignore`): they are stored,
# suppress the recipient they prove, and are shown as unauthenticated, but never pause a domain.
MAILSERVICE_COMPLAINTS_UNAUTHENTICATED = env_str("MAILSERVICE_COMPLAINTS_UNAUTHENTICATED", "ignore")

# --- Operations: GET /metrics (mailservice/metrics.py) ----------------------------------------
# The bearer token Prometheus scrapes /metrics with; unset, /metrics does not exist (404).
MAILSERVICE_METRICS_TOKEN = env_str("MAILSERVICE_METRICS_TOKEN")
# Wrong tokens one client address may present per window ('10/m'); then 429 until the window ends.
MAILSERVICE_METRICS_FAILURE_RATE = env_rate("MAILSERVICE_METRICS_FAILURE_RATE", "10/m")
# prometheus-client's multiprocess mode reads PROMETHEUS_MULTIPROC_DIR itself; the web and worker
# processes of a host share it. It must exist before the first metric is written.
_METRICS_DIR = env_str("PROMETHEUS_MULTIPROC_DIR")
if _METRICS_DIR:
    Path(_METRICS_DIR).mkdir(parents=True, exist_ok=True)

# --- DNS records the console tells operators to publish, and the "Check DNS" lookups -----
# SPF: `v=spf1 include:<MAILSERVICE_SPF_INCLUDE> ~all` (the record is not shown while unset).
MAILSERVICE_SPF_INCLUDE = env_str("MAILSERVICE_SPF_INCLUDE")
# The inbound server's public name: the MX of the return-path domain (or of the sending
# domain) and the name in its SMTP banner (default: this machine's FQDN).
MAILSERVICE_INBOUND_HOST = env_host("MAILSERVICE_INBOUND_HOST")
# "host" or "host:port" of the resolver to ask; unset means the system's resolvers.
MAILSERVICE_DNS_RESOLVER = env_host_port("MAILSERVICE_DNS_RESOLVER")
MAILSERVICE_DNS_TIMEOUT = env_float("MAILSERVICE_DNS_TIMEOUT", 5.0)
# Bounce and complaint rates in the console cover sent messages of this many recent days.
MAILSERVICE_RATE_WINDOW_DAYS = env_int("MAILSERVICE_RATE_WINDOW_DAYS", 30)
# After a DKIM key rotation the old key's record must stay published this long (mail signed with it
# may still sit in queues or be re-verified), then the old key is deleted.
MAILSERVICE_DKIM_RETIRE_DAYS = env_int("MAILSERVICE_DKIM_RETIRE_DAYS", 7)

# --- Celery -----------------------------------------------------------------------------
CELERY_BROKER_URL = env_url("CELERY_BROKER_URL", BROKER_SCHEMES) or REDIS_URL
# Without a broker (the embedded default) tasks run in-process once the send has committed.
CELERY_TASK_ALWAYS_EAGER = CELERY_BROKER_URL is None
# kombu's Redis transport, its channels keeping one Redis client instead of one per publish (config/broker.py).
if CELERY_BROKER_URL and CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    CELERY_BROKER_TRANSPORT = "config.broker:Transport"
CELERY_TASK_EAGER_PROPAGATES = False
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery's Django fixup closes the database connection before and after every task unless this is
# set; config/celery.py applies CONN_MAX_AGE around tasks instead, as Django does around requests.
CELERY_DB_REUSE_MAX = 2**31

# --- Dispatch (messaging/outbound/dispatch.py) -------------------------------------------------------
# Attempt n failing temporarily waits BASE * 2^(n-1) seconds
# (at most BACKOFF_MAX) plus up to JITTER of that; the defaults try 6 times over about 62 minutes.
MAILSERVICE_DISPATCH_MAX_ATTEMPTS = env_int("MAILSERVICE_DISPATCH_MAX_ATTEMPTS", 6)
MAILSERVICE_DISPATCH_BACKOFF_BASE = env_float("MAILSERVICE_DISPATCH_BACKOFF_BASE", 120.0)
MAILSERVICE_DISPATCH_BACKOFF_MAX = env_float("MAILSERVICE_DISPATCH_BACKOFF_MAX", 3600.0)
MAILSERVICE_DISPATCH_BACKOFF_JITTER = env_float("MAILSERVICE_DISPATCH_BACKOFF_JITTER", 0.2)
# A claimed message is the worker's until the lease runs out (renewed right before SMTP), so it
# must outlast one SMTP conversation: well above MAILSERVICE_SMTP_TIMEOUT.
MAILSERVICE_DISPATCH_LEASE_SECONDS = env_float("MAILSERVICE_DISPATCH_LEASE_SECONDS", 300.0)
MAILSERVICE_DISPATCH_BATCH_SIZE = env_int("MAILSERVICE_DISPATCH_BATCH_SIZE", 50)
# The sweeper runs every SWEEP_INTERVAL seconds; a first attempt counts as lost (re-enqueued)
# once no worker has claimed it for SWEEP_GRACE seconds.
MAILSERVICE_DISPATCH_SWEEP_INTERVAL = env_float("MAILSERVICE_DISPATCH_SWEEP_INTERVAL", 30.0)
MAILSERVICE_DISPATCH_SWEEP_GRACE = env_float("MAILSERVICE_DISPATCH_SWEEP_GRACE", 60.0)
MAILSERVICE_DISPATCH_SWEEP_LIMIT = env_int("MAILSERVICE_DISPATCH_SWEEP_LIMIT", 10000)
MAILSERVICE_SMTP_TIMEOUT = env_float("MAILSERVICE_SMTP_TIMEOUT", 30.0)
MAILSERVICE_SMTP_POOL_SIZE = env_int("MAILSERVICE_SMTP_POOL_SIZE", 5)  # one per worker thread (Procfile)
# The name given in EHLO to the relay or to recipients' MX hosts (unset: this machine's FQDN).
MAILSERVICE_HELO_NAME = env_host("MAILSERVICE_HELO_NAME")
# Direct delivery (EMAIL_URL=mx://, messaging/outbound/direct/transport.py): the port MX hosts are reached on
# (25; tests use unprivileged ones), and whether an MX may resolve to loopback, private or link-local
# addresses (refused unless set: tests, a trusted LAN).
MAILSERVICE_MX_PORT = env_int("MAILSERVICE_MX_PORT", 25)
MAILSERVICE_MX_ALLOW_PRIVATE = env_bool("MAILSERVICE_MX_ALLOW_PRIVATE", False)
# Open connections to one destination (a recipient domain's MX hosts rolled up by registrable
# domain, messaging/outbound/direct/destinations.py) at once, over all its hosts, for the whole fleet.
MAILSERVICE_MX_CONNECTIONS = env_int("MAILSERVICE_MX_CONNECTIONS", 10)
# Connection discipline (messaging/outbound/direct/spacing.py): a destination that refused a connection or
# asked to slow down gets nothing, and at most one new connection, per spacing: BASE seconds after its
# first refusal, doubling at each further one up to MAX, halving after a spacing of successes.
MAILSERVICE_MX_SPACING_BASE = env_float("MAILSERVICE_MX_SPACING_BASE", 1.0)
MAILSERVICE_MX_SPACING_MAX = env_float("MAILSERVICE_MX_SPACING_MAX", 300.0)
# Sessions kept open between batches, per worker process (messaging/outbound/direct/sessions.py): closed after
# IDLE_SECONDS unused (0: each batch closes its own), reused for at most SESSION_MESSAGES transactions,
# at most IDLE_SESSIONS kept idle. An idle session keeps its destination's connection slot.
MAILSERVICE_MX_SESSION_IDLE_SECONDS = env_float("MAILSERVICE_MX_SESSION_IDLE_SECONDS", 5.0)
MAILSERVICE_MX_SESSION_MESSAGES = env_int("MAILSERVICE_MX_SESSION_MESSAGES", 100)
MAILSERVICE_MX_IDLE_SESSIONS = env_int("MAILSERVICE_MX_IDLE_SESSIONS", 250)
# Extra trust anchors (PEM) for verified TLS to others' servers, beside the system store: MTA-STS policy
# fetches and the MX certificates a policy requires verified (messaging/outbound/direct/mta_sts.py, tls_policy.py),
# TLS reports' https: submissions.
MAILSERVICE_TLS_CA_FILE = env_str("MAILSERVICE_TLS_CA_FILE")
# The port MTA-STS policy hosts are fetched from (443; tests use unprivileged ones).
MAILSERVICE_MTA_STS_PORT = env_int("MAILSERVICE_MTA_STS_PORT", 443)
# TLS-RPT (RFC 8460, messaging/tls_reports/sending.py): the address daily TLS reports are sent from, on a
# verified sending domain (they must be DKIM-signed); unset, no report is sent.
MAILSERVICE_TLSRPT_FROM = env_address("MAILSERVICE_TLSRPT_FROM")
# At most this many reports a day to one rua mailbox (mailto:) or host (https:), across every policy domain:
# anyone can publish a rua at a third party for domains the service delivers to, and each report is a
# DKIM-signed mail from the operator's reporter. The rest are skipped (mailservice_tls_reports_skipped_total).
MAILSERVICE_TLSRPT_MAX_PER_RUA = env_int("MAILSERVICE_TLSRPT_MAX_PER_RUA", 5)
# Direct delivery's source addresses, `ADDR[=HELO],…` (messaging/outbound/direct/sources.py): each MX connection
# binds to one and gives its name in EHLO (default MAILSERVICE_HELO_NAME); the readiness check tests their SPF
# and reverse DNS. Unset: the system's choice.
MAILSERVICE_SOURCE_ADDRESSES = env_source_addresses("MAILSERVICE_SOURCE_ADDRESSES")
# Warm-up: a new source address may send WARMUP messages per destination on its first UTC day, twice
# as many each day after, until that cap passes WARMUP_CEILING (it is then warm). Unset: no warm-up.
MAILSERVICE_WARMUP = env_int("MAILSERVICE_WARMUP", 0) or None
MAILSERVICE_WARMUP_CEILING = env_int("MAILSERVICE_WARMUP_CEILING", 100000)
if (MAILSERVICE_WARMUP or 0) < 0 or MAILSERVICE_WARMUP_CEILING < 1:
    raise ImproperlyConfigured(
        "MAILSERVICE_WARMUP must be a positive number of messages, MAILSERVICE_WARMUP_CEILING too"
    )
# How many of a batch's destinations are sent to at once, each in a lane (thread) of its own, so a
# slow destination delays only its own messages (messaging/outbound/lanes.py, docs/delivery.md).
MAILSERVICE_MX_PARALLEL_DESTINATIONS = env_int("MAILSERVICE_MX_PARALLEL_DESTINATIONS", 50)
# --- Delivery control (messaging/outbound/fairness.py, messaging/outbound/fleet_limits.py) -----------------------
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
# A message a receiver greylisted (messaging/outbound/greylisting.py) is tried again after this many
# seconds (or what worked for its domain before): postgrey's default delay; the first greylisting uses no attempt.
MAILSERVICE_GREYLIST_DELAY = env_int("MAILSERVICE_GREYLIST_DELAY", 300)
# The last field of every outgoing message's Feedback-ID header (messaging/feedback_id.py): who sends, as
# Gmail's feedback loop groups complaint rates by it. A few low-cardinality letters, digits, dots or dashes.
MAILSERVICE_FEEDBACK_SENDER_ID = env_str("MAILSERVICE_FEEDBACK_SENDER_ID", "mailservice")
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
    # Report mails whose read task was lost (messaging/inbound/aggregate/tasks.py).
    "aggregate-reports-sweep": {
        "task": "messaging.aggregate_reports_sweep",
        "schedule": 60.0,
        "options": {"expires": 60.0},
    },
    # Deletes DKIM keys whose retirement grace period is over (manage.py retire_dkim_keys by hand).
    "dkim-retire": {"task": "domains.dkim_retire", "schedule": 3600.0, "options": {"expires": 3600.0}},
    "retention-purge": {
        "task": "messaging.retention_purge",
        "schedule": MAILSERVICE_RETENTION_PURGE_INTERVAL,
        "options": {"expires": MAILSERVICE_RETENTION_PURGE_INTERVAL},
    },
    # Every domain's readiness check, kept for its console page (messaging/readiness/check.py).
    "readiness-daily": {"task": "messaging.readiness_check", "schedule": 86400.0, "options": {"expires": 3600.0}},
    # The console dashboard's hourly and daily counts (messaging/aggregates.py).
    "status-counts-rollup": {"task": "messaging.status_counts_rollup", "schedule": 60.0, "options": {"expires": 60.0}},
    # Yesterday's TLS reports (RFC 8460), early in the UTC day; manage.py send_tls_reports by hand.
    "tls-reports-send": {
        "task": "messaging.tls_reports_send",
        "schedule": crontab(hour=0, minute=20),
        "options": {"expires": 12 * 3600.0},
    },
}
# --- Webhooks (webhooks/) ---------------------------------------------------------------------
# Private, loopback and link-local targets are refused unless this is set (tests, a trusted LAN).
MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = env_bool("MAILSERVICE_WEBHOOK_ALLOW_PRIVATE", False)
# A 2xx within this many seconds is a success; anything else is retried. One deadline for the
# whole request (connect, TLS, sending, the answer's status and headers), however the receiver
# paces its bytes: the socket is closed by then.
MAILSERVICE_WEBHOOK_TIMEOUT = env_float("MAILSERVICE_WEBHOOK_TIMEOUT", 10.0)
# A claimed delivery is the worker's until then; a killed worker's delivery is claimed again once
# it runs out. Longer than the timeout, so a request is over before its delivery can be claimed again.
MAILSERVICE_WEBHOOK_LEASE_SECONDS = env_float("MAILSERVICE_WEBHOOK_LEASE_SECONDS", 60.0)
if not 0 < MAILSERVICE_WEBHOOK_TIMEOUT < MAILSERVICE_WEBHOOK_LEASE_SECONDS:
    raise ImproperlyConfigured(
        "MAILSERVICE_WEBHOOK_TIMEOUT must be above 0 and below MAILSERVICE_WEBHOOK_LEASE_SECONDS, got"
        f" {MAILSERVICE_WEBHOOK_TIMEOUT:g} and {MAILSERVICE_WEBHOOK_LEASE_SECONDS:g}"
    )
# At most this many requests in flight to one endpoint: a slow one holds only that many threads.
MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY = env_int("MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY", 4)
# The queue of the delivery tasks, consumed by the Procfile's `webhooks` worker and no other, so
# that webhook requests never hold the dispatch worker's threads.
MAILSERVICE_WEBHOOK_QUEUE = env_str("MAILSERVICE_WEBHOOK_QUEUE", "webhooks")
# How often beat fans new events out to endpoints and hands due deliveries to the webhooks worker.
MAILSERVICE_WEBHOOK_PUMP_INTERVAL = env_float("MAILSERVICE_WEBHOOK_PUMP_INTERVAL", 1.0)
# A message publishes at most one `email.delayed` per this many seconds, however often receivers defer it.
MAILSERVICE_DELAYED_EVENT_INTERVAL = env_int("MAILSERVICE_DELAYED_EVENT_INTERVAL", 15 * 60)
# Without a broker (the embedded default) the web process fans events out and sends the requests
# itself, in one background thread (webhooks/inprocess.py), since no beat or webhooks worker runs.
MAILSERVICE_WEBHOOK_IN_PROCESS = env_bool("MAILSERVICE_WEBHOOK_IN_PROCESS", CELERY_BROKER_URL is None)
# The API's public base URL (e.g. https://mail.example.com): links in `email.received` events start
# with it (unset: the links are paths, to be joined to the base URL the application already uses).
MAILSERVICE_API_URL = env_url("MAILSERVICE_API_URL", ("https", "http"))
# How long those links to a received message's raw source and attachments work.
MAILSERVICE_WEBHOOK_LINK_MAX_AGE = env_int("MAILSERVICE_WEBHOOK_LINK_MAX_AGE", 7 * 24 * 3600)
CELERY_TASK_ROUTES = {"webhooks.deliver": {"queue": MAILSERVICE_WEBHOOK_QUEUE}}
CELERY_BEAT_SCHEDULE["webhooks-pump"] = {
    "task": "webhooks.pump",
    "schedule": MAILSERVICE_WEBHOOK_PUMP_INTERVAL,
    "options": {"expires": MAILSERVICE_WEBHOOK_PUMP_INTERVAL},
}
# Idempotency keys are kept 24 hours; expired ones are deleted hourly.
CELERY_BEAT_SCHEDULE["idempotency-purge"] = {"task": "messaging.idempotency_purge", "schedule": 3600.0}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# LOG_FORMAT=json: one JSON object per line on stdout (time, level, logger, message, request_id,
# message_id, domain); text (the default, for development) goes to stderr as before.
LOG_FORMAT = env_choice("LOG_FORMAT", "text", ("text", "json"))
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "mailservice.logs.ContextFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s %(request_id)s %(message_id)s %(domain)s",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": "time",  # ISO 8601, UTC
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": LOG_FORMAT,
            "filters": ["context"],
            "stream": "ext://sys.stdout" if LOG_FORMAT == "json" else "ext://sys.stderr",
        }
    },
    "root": {"handlers": ["console"], "level": env_choice("LOG_LEVEL", "INFO", LOG_LEVELS)},
    # aiosmtpd traces every SMTP command at INFO; the inbound server logs what it decides itself.
    # django-axes announces its configuration at INFO in every process, commands' one-line errors included.
    "loggers": {
        "django.request": {"level": "ERROR"},
        "mail.log": {"level": env_choice("SMTP_LOG_LEVEL", "WARNING", LOG_LEVELS)},
        "axes.apps": {"level": "WARNING"},
    },
}
# Celery replaces the root logger's handlers with its own text format unless told not to.
CELERY_WORKER_HIJACK_ROOT_LOGGER = LOG_FORMAT != "json"

"""Test settings: the production settings, with a throwaway key and a fast password hasher."""

import os

os.environ.setdefault("MAILSERVICE_ENV_FILE", os.devnull)
os.environ.setdefault("SECRET_KEY", "test-only-secret-key-not-for-production-use-0123456789")
# A fixed Fernet key (child processes inherit it): DKIM private keys are stored encrypted.
os.environ.setdefault("MAILSERVICE_ENCRYPTION_KEYS", "dGVzdC1vbmx5LWZlcm5ldC1rZXktMzItYnl0ZXMhISE=")

# pytest-xdist: each worker ("gw0", "gw1", …) works on databases of its own. pytest-django names its test
# database after it; its Redis database is REDIS_URL's index + 8 + its number (8 to 15 from database 0), so a
# worker's cache.clear() or broker never touches another's, nor the development broker docs/delivery.md puts
# on database 1. Child processes of live tests inherit both.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")
if WORKER:  # the block of ports its servers take (tests/harness/process.py), for its children too
    os.environ["MAILSERVICE_TEST_PORT_BLOCK"] = WORKER.removeprefix("gw")
if WORKER and os.environ.get("REDIS_URL") and "MAILSERVICE_TEST_REDIS_BASE" not in os.environ:
    from urllib.parse import urlsplit

    _redis = urlsplit(os.environ["REDIS_URL"])
    os.environ["MAILSERVICE_TEST_REDIS_BASE"] = os.environ["REDIS_URL"]
    _index = int(_redis.path.lstrip("/") or 0) + 8 + int(WORKER.removeprefix("gw"))
    os.environ["REDIS_URL"] = _redis._replace(path=f"/{_index}").geturl()
    os.environ.pop("CELERY_BROKER_URL", None)  # the broker follows REDIS_URL

from config.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Live tests start child processes on the test database, so a SQLite one must be a file.
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):  # noqa: F405
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}  # noqa: F405
# Under `make test`, the workers' PostgreSQL test databases are copies of one migrated once for the run
# (tests/harness/template_db.py), not each migrated again.
elif os.environ.get("MAILSERVICE_TEST_TEMPLATE_DB"):
    DATABASES["default"]["TEST"] = {"TEMPLATE": os.environ["MAILSERVICE_TEST_TEMPLATE_DB"]}  # noqa: F405

# The test process itself dispatches in-process to a file outbox of its own; the live tests'
# child processes get a real broker and relay through their environment.
CELERY_TASK_ALWAYS_EAGER = True
EMAIL_URL = None
MAILSERVICE_OUTBOX_DIR = VAR_DIR / f"test-outbox{'-' + WORKER if WORKER else ''}"  # noqa: F405
# The test process keeps no API keys between requests: its tests roll back instead of committing, so
# a change would never set a new version (apikeys/cache.py). The live tests' web processes do cache.
MAILSERVICE_API_KEY_CACHE_SECONDS = 0.0
# The test process sends no webhooks from a thread of its own (its tests roll back what they write);
# the embedded mode's child processes do (tests/api/test_embedded_mode.py).
MAILSERVICE_WEBHOOK_IN_PROCESS = False
# Webhook receivers in tests listen on loopback.
MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = True
# So are the MX hosts of direct-delivery tests.
MAILSERVICE_MX_ALLOW_PRIVATE = True

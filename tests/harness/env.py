"""The environment of the children of live tests: production-like settings on the test database."""

import os
from pathlib import Path

from django.db import connection

# A dispatch schedule short enough for tests: attempts 0.3 s apart, the sweeper every 0.3 s.
FAST_DISPATCH = {
    "MAILSERVICE_DISPATCH_BACKOFF_BASE": "0.3",
    "MAILSERVICE_DISPATCH_BACKOFF_JITTER": "0",
    "MAILSERVICE_DISPATCH_SWEEP_INTERVAL": "0.3",
    "MAILSERVICE_DISPATCH_SWEEP_GRACE": "1",
    "MAILSERVICE_DISPATCH_LEASE_SECONDS": "3",
    "MAILSERVICE_SMTP_TIMEOUT": "5",
    "CELERY_VISIBILITY_TIMEOUT": "2",
}


def current_database_url() -> str:
    """DATABASE_URL of the database this test run uses (pytest-django's test database)."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    auth = db["USER"] + (f":{db['PASSWORD']}" if db["PASSWORD"] else "")
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


def child_env(**overrides: str) -> dict[str, str]:
    """The environment of a child process: production-like settings on the test database."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "DJANGO_SETTINGS_MODULE"))}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DEBUG="false",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        SECRET_KEY=os.environ["SECRET_KEY"],
        DATABASE_URL=current_database_url(),
        DATABASE_CONN_MAX_AGE="0",
        MAILSERVICE_RATE_LIMIT="100000/m",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env

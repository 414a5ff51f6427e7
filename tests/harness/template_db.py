"""One migrated database for a parallel run: the workers' test databases are copies of it.

pytest-django gives each pytest-xdist worker a test database of its own (`test_mailservice_gw0`, …) and
would migrate each one. The controller instead migrates one, `test_<name>_template`, before it starts the
workers; each worker's database is made from it with `CREATE DATABASE … TEMPLATE` (tests/settings.py), a
file copy, and Django's migrate then finds nothing to apply. The template is dropped when the run ends,
and one an interrupted run left is replaced by the next. PostgreSQL only; a serial run migrates as before.
"""

import os
import subprocess
import sys
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.harness.process import ROOT

ENV = "MAILSERVICE_TEST_TEMPLATE_DB"


def _template(config: pytest.Config) -> tuple[str, str] | None:
    """(the server's maintenance URL, the template's name) when this is a parallel run's controller."""
    url = os.environ.get("DATABASE_URL", "")
    parallel = bool(config.getoption("numprocesses", None)) and not hasattr(config, "workerinput")
    if not parallel or not url.startswith(("postgres://", "postgresql://")):
        return None
    parts = urlsplit(url)
    return parts._replace(path="/postgres").geturl(), f"test_{parts.path.lstrip('/')}_template"


def pytest_configure(config: pytest.Config) -> None:
    template = _template(config)
    if template is None:
        return
    maintenance_url, name = template
    with psycopg.connect(maintenance_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    database_url = urlsplit(os.environ["DATABASE_URL"])._replace(path=f"/{name}").geturl()
    env = {key: value for key, value in os.environ.items() if key != ENV}
    env.update(DJANGO_SETTINGS_MODULE="tests.settings", DATABASE_URL=database_url)
    migrate = [sys.executable, "manage.py", "migrate", "--verbosity", "0", "--no-input"]
    finished = subprocess.run(migrate, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    if finished.returncode != 0:
        raise pytest.UsageError(f"migrating the template database {name} failed:\n{finished.stderr}")
    os.environ[ENV] = name  # the workers inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    template = _template(config)
    if template is None or os.environ.pop(ENV, None) is None:
        return
    maintenance_url, name = template
    with psycopg.connect(maintenance_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

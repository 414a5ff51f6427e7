"""Real processes for black-box tests: the web server (and, later, workers) on the test database.

Tests that use these need `transactional_db`, so what they create is committed and visible
to the child processes, which are pointed at the same test database and Redis.
"""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_database_url() -> str:
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
        DATABASE_URL=test_database_url(),
        DATABASE_CONN_MAX_AGE="0",
        MAILSERVICE_RATE_LIMIT="100000/m",
        PYTHONUNBUFFERED="1",
    )
    env.update(overrides)
    return env


def wait_until(predicate, *, timeout: float, interval: float = 0.05, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


@contextmanager
def web_server(*, workers: int = 2, **env: str) -> Iterator[str]:
    """gunicorn serving the project on a free loopback port; yields the base URL."""
    port = free_port()
    log = open(ROOT / "var" / f"web-{port}.log", "w")  # noqa: SIM115 - lives as long as the process
    process = subprocess.Popen(
        [
            str(BIN / "gunicorn"),
            "config.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--access-logfile",
            "-",
        ],
        cwd=ROOT,
        env=child_env(**env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: process.poll() is None and _answers(base_url + "/v1/openapi.json"),
            timeout=30,
            message=f"gunicorn on {base_url} (log: {log.name})",
        )
        yield base_url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()

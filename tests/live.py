"""Real processes for black-box tests: the web server, the inbound SMTP server (and workers) on the test database.

Tests that use these need `transactional_db`, so what they create is committed and visible
to the child processes, which are pointed at the same test database and Redis.
"""

import os
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
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


def _serves_smtp(port: int) -> bool:
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=1) as smtp:
            return smtp.noop()[0] == 250
    except (OSError, smtplib.SMTPException):
        return False


@contextmanager
def _child(command: list[str], *, name: str, ready: Callable[[int], bool], env: dict[str, str]) -> Iterator[int]:
    """A child process serving on a free loopback port (passed as {port} in the command); yields the port."""
    port = free_port()
    log = open(ROOT / "var" / f"{name}-{port}.log", "w")  # noqa: SIM115 - lives as long as the process
    process = subprocess.Popen(
        [part.format(port=port) for part in command],
        cwd=ROOT,
        env=child_env(**env),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(
            lambda: process.poll() is None and ready(port),
            timeout=30,
            message=f"{name} on port {port} (log: {log.name})",
        )
        yield port
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@contextmanager
def web_server(*, workers: int = 2, **env: str) -> Iterator[str]:
    """gunicorn serving the project on a free loopback port; yields the base URL."""
    command = [str(BIN / "gunicorn"), "config.wsgi", "--bind", "127.0.0.1:{port}", "--workers", str(workers)]
    command += ["--access-logfile", "-"]
    ready = lambda port: _answers(f"http://127.0.0.1:{port}/v1/openapi.json")  # noqa: E731
    with _child(command, name="web", ready=ready, env=env) as port:
        yield f"http://127.0.0.1:{port}"


@contextmanager
def inbound_smtp_server(**env: str) -> Iterator[int]:
    """`manage.py run_inbound_smtp` on a free loopback port; yields the port."""
    command = [sys.executable, "manage.py", "run_inbound_smtp", "--host", "127.0.0.1", "--port", "{port}"]
    with _child(command, name="inbound", ready=_serves_smtp, env=env) as port:
        yield port

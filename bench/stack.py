"""The real pieces a benchmark runs against: its own PostgreSQL database, Redis, gunicorn.

The bench process itself runs Django on the bench database (to load data with COPY and to
EXPLAIN queries); servers are started with tests.harness.web_server, the same process starter
the live tests use, pointed at whatever database a scenario chooses.
"""

import os
import secrets
import subprocess
import sys
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from cryptography.fernet import Fernet
from dotenv import dotenv_values

if TYPE_CHECKING:
    from tests.harness import ChildServer

ROOT = Path(__file__).resolve().parent.parent

# The bench servers answer every request: the rate limit is part of the measured path, not a cap on it.
BENCH_RATE_LIMIT = "100000000/m"


class BenchError(Exception):
    """A benchmark cannot run (missing service, bad argument); reported without a traceback."""


@dataclass(frozen=True)
class Services:
    database_url: str  # the bench's own PostgreSQL database, created and dropped by the harness
    redis_url: str


def services_from_environment(database: str | None) -> Services:
    """DATABASE_URL names the PostgreSQL server (the bench uses its own database `<name>_run`
    on it, or `database`); REDIS_URL the Redis database the bench servers may use. Either comes from the
    environment, else from .env as every other command reads it (only these two: the bench sets the rest)."""
    written = dotenv_values(os.environ.get("MAILSERVICE_ENV_FILE") or ROOT / ".env")
    database_url = os.environ.get("DATABASE_URL") or written.get("DATABASE_URL") or ""
    redis_url = os.environ.get("REDIS_URL") or written.get("REDIS_URL") or ""
    parts = urlsplit(database_url)
    if parts.scheme not in {"postgres", "postgresql"}:
        raise BenchError(
            "set DATABASE_URL (in the environment or .env) to a PostgreSQL server (postgres://…):"
            " the bench creates its own database"
        )
    if not redis_url.startswith("redis://"):
        raise BenchError("set REDIS_URL (in the environment or .env) to the Redis database the bench may use")
    name = database or (parts.path.lstrip("/") or "mailservice") + "_run"
    return Services(database_url=urlunsplit(parts._replace(path=f"/{name}")), redis_url=redis_url)


def configure_django(services: Services) -> None:
    """Django in this process, on the bench database, with the settings the servers get."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=services.database_url,
        REDIS_URL=services.redis_url,
        DEBUG="false",
        SECRET_KEY=os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50),
        # The bench's database is thrown away after the run, and so is the key its DKIM keys are encrypted with.
        MAILSERVICE_ENCRYPTION_KEYS=os.environ.get("MAILSERVICE_ENCRYPTION_KEYS") or Fernet.generate_key().decode(),
    )
    import django

    django.setup()


@contextmanager
def empty_database(database_url: str) -> Iterator[None]:
    """A fresh, empty PostgreSQL database named by `database_url`, dropped afterwards whatever happens."""
    import psycopg

    parts = urlsplit(database_url)
    name = parts.path.lstrip("/")
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    try:
        admin = psycopg.connect(admin_url, autocommit=True)
    except psycopg.OperationalError as error:
        raise BenchError(f"cannot reach PostgreSQL at {parts.hostname}:{parts.port}: {error}") from None
    with admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def postgres_database(database_url: str) -> Iterator[None]:
    """A fresh, migrated database for one bench run (this process's Django uses it)."""
    with empty_database(database_url):
        try:
            from django.core.management import call_command

            call_command("migrate", verbosity=0)
            yield
        finally:
            from django.db import connections

            connections.close_all()


def server_env(**overrides: str) -> dict[str, str]:
    """Environment for a bench server: production settings (DEBUG off, persistent database
    connections as deployed), with the rate limit raised."""
    return {"DATABASE_CONN_MAX_AGE": "60", "MAILSERVICE_RATE_LIMIT": BENCH_RATE_LIMIT, **overrides}


def manage(env: dict[str, str], *args: str) -> str:
    """Run a management command in a child process with the server's environment; its stdout."""
    from tests.harness import child_env

    done = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=child_env(**env), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise BenchError(f"manage.py {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def migrate(env: dict[str, str]) -> None:
    """Migrate a server's database that is not the bench's own (which postgres_database migrates)."""
    manage(env, "migrate", "--verbosity", "0")


def create_key(env: dict[str, str], *, domain: str) -> str:
    """A verified domain (created if need be) and a fresh full-permission bearer key for it."""
    return manage(env, "bootstrap_demo", "--domain", domain).strip().splitlines()[-1].removeprefix("KEY=")


@contextmanager
def server(env: dict[str, str], *, workers: int) -> Iterator[str]:
    """gunicorn as the live tests start it (its access log, to a file under var/, included)."""
    from tests.harness import web_server

    (ROOT / "var").mkdir(exist_ok=True)
    with web_server(workers=workers, **env) as base_url:
        yield base_url


@contextmanager
def reference_server(services: Services, *, workers: int) -> Iterator[str]:
    """bench.reference (R0 at /r0, R1 at /r1) on gunicorn sync workers, writing to the bench's database and
    Redis whatever the product under test uses; yields the base URL."""
    from bench.reference.schema import create_tables
    from tests.harness import BIN, answers_http, child_server

    create_tables(services.database_url)
    command = [str(BIN / "gunicorn"), "bench.reference.wsgi", "--workers", str(workers), "--bind", "127.0.0.1:{port}"]
    env = {
        "DJANGO_SETTINGS_MODULE": "bench.reference.settings",
        "DATABASE_URL": services.database_url,
        "REDIS_URL": services.redis_url,
    }
    with child_server(
        command, name="reference", ready=lambda port: answers_http(f"http://127.0.0.1:{port}/r0"), env=env
    ) as child:
        yield f"http://127.0.0.1:{child.port}"


@contextmanager
def durable_inbound_sink(services: Services) -> Iterator["ChildServer"]:
    """bench.reference.inbound (bare aiosmtpd committing each raw message before its 250) in a process of its own."""
    from bench.reference.schema import create_tables
    from tests.harness import child_server, serves_smtp

    create_tables(services.database_url)
    command = [sys.executable, "-m", "bench.reference.inbound", "--port", "{port}"]
    command += ["--database-url", services.database_url]
    with child_server(command, name="durable-sink", ready=serves_smtp, env={}) as child:
        yield child


@contextmanager
def discard_sink(*options: str, tls: tuple[str, str] | None = None) -> Iterator["ChildServer"]:
    """bench.sink (accepts and discards every message) in a process of its own; `options` e.g. its throttling;
    STARTTLS with `tls` (cert, key)."""
    from tests.harness import child_server, serves_smtp

    command = [sys.executable, "-m", "bench.sink", "--port", "{port}", *options]
    if tls is not None:
        command += ["--tls-cert", tls[0], "--tls-key", tls[1]]
    with child_server(command, name="sink", ready=serves_smtp, env={}) as child:
        yield child


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    """A process's resident set size (VmRSS in /proc/<pid>/status), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise BenchError(f"process {pid} has no VmRSS (has it exited?)")


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants, parents before children (a gunicorn master, then its workers)."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
            except (OSError, IndexError, ValueError):  # exited while we looked
                continue
            children[parent].append(int(entry.name))
    tree, queue = [], deque([pid])
    while queue:
        tree.append(current := queue.popleft())
        queue.extend(children[current])
    return tree


def serving_pid(port: int) -> int:
    """The bench's own child process started with `port` on its command line (`--port N`, `--bind host:N`):
    the harness hands back a port or a URL, and /proc is where its CPU time and memory are read."""
    for pid in process_tree(os.getpid())[1:]:
        try:
            arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(argument == str(port).encode() or argument.endswith(f":{port}".encode()) for argument in arguments):
            return pid
    raise BenchError(f"no child process of the bench serves port {port}")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by `pid` and its live descendants (a server's master and workers together)."""
    total = 0.0
    for member in process_tree(pid):
        try:
            total += cpu_seconds(member)
        except (OSError, IndexError):  # exited while we looked
            continue
    return total

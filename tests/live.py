"""Real processes for black-box tests: the web server, the inbound SMTP server (and workers) on the test database.

Tests that use these need `transactional_db`, so what they create is committed and visible
to the child processes, which are pointed at the same test database and Redis.
"""

import asyncio
import email
import email.policy
import os
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TypeVar

import httpx
import redis
from aiosmtpd.controller import Controller
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOG_DIR = ROOT / "var"  # the child processes' logs
LOG_DIR.mkdir(exist_ok=True)


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


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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


def wait_until(predicate, *, timeout: float, interval: float = 0.05, message: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


def _stop(process: subprocess.Popen, *, sig: int = signal.SIGTERM) -> None:
    """Signal the process group (a worker's pool children and embedded beat included) and reap it."""
    with suppress(ProcessLookupError):
        os.killpg(process.pid, sig)
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


class CeleryWorker:
    """`celery -A config worker -B` (embedded beat unless `beat=False`) on the test database; restartable.

    Solo pool, or the README's thread pool with `threads` batches at once; `queues` (comma-separated)
    instead of the default queue, as the Procfile's webhooks worker."""

    def __init__(self, env: dict[str, str], *, beat: bool = True, threads: int = 0, queues: str = "") -> None:
        self.env = env
        self.beat = beat
        self.queues = ["-Q", queues] if queues else []
        self.pool = ["--pool", "threads", "--concurrency", str(threads)] if threads else ["--pool", "solo"]
        self.process: subprocess.Popen | None = None
        self.state_dir = tempfile.mkdtemp(prefix="celerybeat-")
        self.log_path = LOG_DIR / f"worker-{os.getpid()}-{free_port()}.log"

    def start(self) -> None:
        log = open(self.log_path, "a")  # noqa: SIM115 - the child holds its own copy
        beat = ["-B", "-s", f"{self.state_dir}/schedule"] if self.beat else []
        self.process = subprocess.Popen(
            [str(BIN / "celery"), "-A", "config", "worker", *beat, *self.pool, *self.queues]
            + ["--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float = 30) -> None:
        """After the first start: until the worker consumes from the queue (its log says `ready.`)."""
        wait_until(
            lambda: self.alive() and " ready." in self.log_path.read_text(),
            timeout=timeout,
            message=f"the worker to be ready (log: {self.log_path})",
        )

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a power cut would: no cleanup, no acknowledgement."""
        assert self.process is not None
        _stop(self.process, sig=signal.SIGKILL)
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None


@contextmanager
def celery_worker(
    *, start: bool = True, beat: bool = True, threads: int = 0, queues: str = "", **env: str
) -> Iterator[CeleryWorker]:
    """A worker (with embedded beat unless `beat=False`: run exactly one beat); give it and the web the same
    CELERY_TASK_DEFAULT_QUEUE, a queue of their own."""
    worker = CeleryWorker(child_env(**env), beat=beat, threads=threads, queues=queues)
    if start:
        worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        shutil.rmtree(worker.state_dir)


class RedisServer:
    """A private throwaway redis-server on `port` (never the shared one), without persistence; restartable."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"redis://127.0.0.1:{port}/0"
        self.process: subprocess.Popen | None = None

    def _answers(self) -> bool:
        client = redis.Redis.from_url(self.url)
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False
        finally:
            client.close()

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until(self._answers, timeout=10, message=f"redis-server on port {self.port}")

    def stop(self) -> None:
        if self.process is not None:
            _stop(self.process)
            self.process = None

    def restart(self) -> None:
        """Stop and start again: everything queued in it is gone, as after a crash without persistence."""
        self.stop()
        self.start()


class Startable(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


S = TypeVar("S", bound=Startable)


@contextmanager
def running(server: S) -> Iterator[S]:
    """Start `server`, yield it, stop it whatever happened."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


@contextmanager
def redis_server(port: int) -> Iterator[str]:
    """A private throwaway redis-server on `port` (never the shared one); yields its URL."""
    with running(RedisServer(port)) as server:
        yield server.url


class PostgresCluster:
    """A private PostgreSQL cluster (initdb in a temporary directory) on a free loopback port; restartable.

    Never the shared server: chaos tests restart this one. initdb and pg_ctl refuse to run as
    root, so they run as the `postgres` user when we are root.
    """

    BIN_DIR = Path(os.environ.get("POSTGRES_BIN_DIR", "/usr/lib/postgresql/15/bin"))

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="pgcluster-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.log_path = self.directory / "postgres.log"  # inside the directory the postgres user owns

    def url(self, name: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"

    def _run(self, *command: str) -> None:
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run([*as_postgres, *command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(str(self.BIN_DIR / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        self.pg_ctl("start")

    def pg_ctl(self, action: str) -> None:
        """`start`, `stop` or `restart` (fast: open connections are cut, as in a crash or failover)."""
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.BIN_DIR / "pg_ctl"),
            "-D",
            str(self.data),
            "-l",
            str(self.log_path),
            "-o",
            options,
            "-m",
            "fast",
            "-w",
            action,
        )

    def create_database(self, name: str) -> str:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        """Stop the server and delete the cluster."""
        with suppress(subprocess.CalledProcessError):
            self.pg_ctl("stop")
        shutil.rmtree(self.directory, ignore_errors=True)


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    peer: tuple[str, int]  # the client's address: one per SMTP connection


@dataclass
class SinkBehaviour:
    """What the sink answers; tests change it while it runs."""

    data_replies: list[str] = field(default_factory=list)  # answered to DATA in order, then 250
    rejected_rcpts: dict[str, str] = field(default_factory=dict)  # address -> reply to RCPT TO
    hold: threading.Event | None = None  # DATA waits until this is set (or the client goes away)
    data_reply: str | None = None  # while set, every DATA is answered with it (an outage: 421, 451)
    drop: bool = False  # while set, DATA gets no answer: the connection is cut


class SmtpSink:
    """A real SMTP server (aiosmtpd) on a loopback port that records what it accepted."""

    def __init__(self) -> None:
        self.behaviour = SinkBehaviour()
        self.received: list[Received] = []
        self.in_data = 0  # DATA transactions that have started (held or not)
        self.port = free_port()
        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, enable_SMTPUTF8=True)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def message_ids(self) -> Counter:
        """How many times each Message-ID was accepted."""
        return Counter(
            email.message_from_bytes(received.data, policy=email.policy.default)["Message-ID"]
            for received in self.received
        )

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802 - aiosmtpd hook
        if address in self.behaviour.rejected_rcpts:
            return self.behaviour.rejected_rcpts[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd hook
        self.in_data += 1
        hold = self.behaviour.hold
        while hold is not None and not hold.is_set():
            # A client that disconnects cancels this coroutine: nothing is recorded, as a relay
            # that never answered 250 has not taken the message.
            await asyncio.sleep(0.05)
        if self.behaviour.drop:
            server.transport.close()
            return "421 4.3.0 connection dropped"  # never reaches the client
        if self.behaviour.data_reply is not None:
            return self.behaviour.data_reply
        if self.behaviour.data_replies:
            return self.behaviour.data_replies.pop(0)
        self.received.append(Received(envelope.mail_from, list(envelope.rcpt_tos), envelope.content, session.peer))
        return "250 2.0.0 OK: queued"


@contextmanager
def smtp_sink() -> Iterator[SmtpSink]:
    sink = SmtpSink()
    sink.controller.start()
    try:
        yield sink
    finally:
        if sink.behaviour.hold is not None:
            sink.behaviour.hold.set()
        sink.controller.stop()


def _answers(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


def serves_smtp(port: int) -> bool:
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=1) as smtp:
            return smtp.noop()[0] == 250
    except (OSError, smtplib.SMTPException):
        return False


@dataclass(frozen=True)
class ChildServer:
    port: int
    pid: int


@contextmanager
def child_server(
    command: list[str], *, name: str, ready: Callable[[int], bool], env: dict[str, str]
) -> Iterator[ChildServer]:
    """A child process serving on a free loopback port (passed as {port} in the command)."""
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
        yield ChildServer(port=port, pid=process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


WEB_COMMAND = [str(BIN / "gunicorn"), "config.wsgi", "--bind", "127.0.0.1:{port}", "--access-logfile", "-"]


@contextmanager
def web_server(*, workers: int = 2, **env: str) -> Iterator[str]:
    """gunicorn serving the project on a free loopback port; yields the base URL."""
    ready = lambda port: _answers(f"http://127.0.0.1:{port}/v1/openapi.json")  # noqa: E731
    with child_server([*WEB_COMMAND, "--workers", str(workers)], name="web", ready=ready, env=env) as child:
        yield f"http://127.0.0.1:{child.port}"


class WebProcess:
    """gunicorn on a fixed loopback port that can be stopped and started again (a deploy, a crash)."""

    def __init__(self, env: dict[str, str], *, workers: int = 2) -> None:
        self.env, self.workers = env, workers
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = LOG_DIR / f"web-{self.port}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.log_path, "a")  # noqa: SIM115 - the child holds its own copy
        command = [part.format(port=self.port) for part in [*WEB_COMMAND, "--workers", str(self.workers)]]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        process = self.process
        wait_until(
            lambda: process.poll() is None and _answers(f"{self.url}/v1/openapi.json"),
            timeout=30,
            message=f"web on port {self.port} (log: {self.log_path})",
        )

    def serving(self) -> bool:
        return self.process is not None and self.process.poll() is None and _answers(f"{self.url}/v1/openapi.json")

    def stop(self) -> None:
        """SIGTERM: gunicorn finishes the requests in flight, then exits."""
        if self.process is not None:
            _stop(self.process)
            self.process = None


@contextmanager
def inbound_smtp_server(**env: str) -> Iterator[int]:
    """`manage.py run_inbound_smtp` on a free loopback port; yields the port."""
    command = [sys.executable, "manage.py", "run_inbound_smtp", "--host", "127.0.0.1", "--port", "{port}"]
    with child_server(command, name="inbound", ready=serves_smtp, env=env) as child:
        yield child.port

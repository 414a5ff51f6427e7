"""Real processes for black-box tests: the web server, the inbound SMTP server (and workers) on the test database.

Tests that use these need `transactional_db`, so what they create is committed and visible
to the child processes, which are pointed at the same test database and Redis.
"""

import asyncio
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
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis
from aiosmtpd.controller import Controller
from django.db import connection

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
LOG_DIR = ROOT / "var"  # the child processes' logs
LOG_DIR.mkdir(exist_ok=True)


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
    """`celery -A config worker` (solo pool, embedded beat unless `beat` is off) on the test database; restartable."""

    def __init__(self, env: dict[str, str], *, beat: bool = True) -> None:
        self.env = env
        self.beat = beat
        self.process: subprocess.Popen | None = None
        self.state_dir = tempfile.mkdtemp(prefix="celerybeat-")
        self.log_path = LOG_DIR / f"worker-{os.getpid()}-{free_port()}.log"

    def start(self) -> None:
        log = open(self.log_path, "a")  # noqa: SIM115 - the child holds its own copy
        self.process = subprocess.Popen(
            [str(BIN / "celery"), "-A", "config", "worker", "--pool", "solo"]
            + (["-B", "-s", f"{self.state_dir}/schedule"] if self.beat else [])
            + ["--without-gossip", "--without-mingle", "--loglevel", "INFO"],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()

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
def celery_worker(*, start: bool = True, beat: bool = True, **env: str) -> Iterator[CeleryWorker]:
    """A worker (with embedded beat unless `beat` is off); give it and the web the same
    CELERY_TASK_DEFAULT_QUEUE, a queue of their own."""
    worker = CeleryWorker(child_env(**env), beat=beat)
    if start:
        worker.start()
    try:
        yield worker
    finally:
        worker.stop()
        shutil.rmtree(worker.state_dir)


@contextmanager
def redis_server(port: int) -> Iterator[str]:
    """A private throwaway redis-server on `port` (never the shared one); yields its URL."""
    process = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    try:
        wait_until(answers, timeout=10, message=f"redis-server on port {port}")
        yield url
    finally:
        client.close()
        _stop(process)


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


@contextmanager
def web_server(*, workers: int = 2, **env: str) -> Iterator[str]:
    """gunicorn serving the project on a free loopback port; yields the base URL."""
    command = [str(BIN / "gunicorn"), "config.wsgi", "--bind", "127.0.0.1:{port}", "--workers", str(workers)]
    command += ["--access-logfile", "-"]
    ready = lambda port: _answers(f"http://127.0.0.1:{port}/v1/openapi.json")  # noqa: E731
    with child_server(command, name="web", ready=ready, env=env) as child:
        yield f"http://127.0.0.1:{child.port}"


@contextmanager
def inbound_smtp_server(**env: str) -> Iterator[int]:
    """`manage.py run_inbound_smtp` on a free loopback port; yields the port."""
    command = [sys.executable, "manage.py", "run_inbound_smtp", "--host", "127.0.0.1", "--port", "{port}"]
    with child_server(command, name="inbound", ready=serves_smtp, env=env) as child:
        yield child.port

"""The servers live tests run: gunicorn, the inbound SMTP server, Celery workers, a private
redis-server and a private PostgreSQL cluster. Each child is a ChildProcess."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar
from urllib.parse import urlsplit

import httpx
import redis

from tests.harness.env import child_env
from tests.harness.process import BIN, LOG_DIR, ROOT, ChildProcess, free_port
from tests.harness.smtp import serves_smtp


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


def answers_http(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
    except httpx.TransportError:
        return False
    return True


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
    child = ChildProcess(
        [part.format(host="127.0.0.1", port=port) for part in command],
        name=name,
        env=child_env(**env),
        ready=lambda: ready(port),
        log_path=LOG_DIR / f"{name}-{port}.log",  # found again by the port, as tests that read a server's log do
    )
    with running(child):
        yield ChildServer(port=port, pid=child.pid)


# The Procfile's web server (gunicorn supervising uvicorn, Django in its thread pool: config/asgi.py).
WEB_COMMAND = [
    str(BIN / "gunicorn"),
    "config.asgi",
    "--worker-class",
    "config.workers.WebWorker",
    "--bind",
    "{host}:{port}",
    "--access-logfile",
    "-",
]
# Plain sync WSGI (config/wsgi.py), for embedding the project in another WSGI server.
WSGI_COMMAND = [str(BIN / "gunicorn"), "config.wsgi", "--bind", "{host}:{port}", "--access-logfile", "-"]


def _serves_openapi(port: int, host: str = "127.0.0.1") -> bool:
    return answers_http(f"http://{host}:{port}/v1/openapi.json")


@contextmanager
def web_server(*, workers: int = 2, wsgi: bool = False, **env: str) -> Iterator[str]:
    """gunicorn on a free loopback port (the Procfile's server, or plain WSGI); yields the base URL."""
    command = [*(WSGI_COMMAND if wsgi else WEB_COMMAND), "--workers", str(workers)]
    with child_server(command, name="web", ready=_serves_openapi, env=env) as child:
        yield f"http://127.0.0.1:{child.port}"


class WebProcess(ChildProcess):
    """gunicorn on a fixed loopback port that can be stopped and started again (a deploy, a crash).

    `stop` is SIGTERM: gunicorn finishes the requests in flight, then exits. On another host's address
    than loopback's first, in the network namespace `netns`, for the nodes-apart test."""

    def __init__(
        self, env: dict[str, str], *, workers: int = 2, host: str = "127.0.0.1", netns: str | None = None
    ) -> None:
        self.host, self.port = host, free_port()
        self.url = f"http://{host}:{self.port}"
        command = [part.format(host=host, port=self.port) for part in [*WEB_COMMAND, "--workers", str(workers)]]
        super().__init__(command, name="web", env=env, ready=self.serving, netns=netns)

    def serving(self) -> bool:
        return self.alive() and _serves_openapi(self.port, self.host)


@contextmanager
def inbound_smtp_server(**env: str) -> Iterator[int]:
    """`manage.py run_inbound_smtp` on a free loopback port; yields the port."""
    command = [sys.executable, "manage.py", "run_inbound_smtp", "--host", "127.0.0.1", "--port", "{port}"]
    with child_server(command, name="inbound", ready=serves_smtp, env=env) as child:
        yield child.port


class CeleryWorker(ChildProcess):
    """`celery -A config worker -B` (embedded beat unless `beat=False`) on the test database; restartable.

    Solo pool, or the thread pool of docs/delivery.md with `threads` batches at once; `queues` (comma-separated)
    instead of the default queue, as the Procfile's webhooks worker. `start` returns at once;
    `wait_ready` waits until the worker consumes from the queue (its log says `ready.`)."""

    def __init__(
        self,
        env: dict[str, str],
        *,
        beat: bool = True,
        threads: int = 0,
        queues: str = "",
        netns: str | None = None,
    ) -> None:
        self.state_dir = tempfile.mkdtemp(prefix="celerybeat-")
        pool = ["--pool", "threads", "--concurrency", str(threads)] if threads else ["--pool", "solo"]
        command = [str(BIN / "celery"), "-A", "config", "worker"]
        command += ["-B", "-s", f"{self.state_dir}/schedule"] if beat else []
        command += [*pool, *(["-Q", queues] if queues else [])]
        command += ["--without-gossip", "--without-mingle", "--loglevel", "INFO"]
        super().__init__(command, name="worker", env=env, ready=self._consuming, wait_on_start=False, netns=netns)

    def _consuming(self) -> bool:
        return " ready." in self.log_path.read_text()


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


class RedisServer(ChildProcess):
    """A private throwaway redis-server on `port` (never the shared one), without persistence; restartable.
    On `host` in the network namespace `netns` for the nodes-apart test."""

    def __init__(self, port: int, *, host: str = "127.0.0.1", netns: str | None = None) -> None:
        self.port = port
        self.url = f"redis://{host}:{port}/0"
        command = ["redis-server", "--bind", host, "--port", str(port), "--save", "", "--appendonly", "no"]
        # Protected mode answers only loopback's own clients: in a namespace, the other nodes are the clients.
        command += ["--protected-mode", "no"] if netns else []
        super().__init__(
            command, name="redis", env=dict(os.environ), ready=self._answers, ready_timeout=10, netns=netns
        )

    def _answers(self) -> bool:
        client = redis.Redis.from_url(self.url)
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False
        finally:
            client.close()

    def restart(self) -> None:
        """Stop and start again: everything queued in it is gone, as after a crash without persistence."""
        self.stop()
        self.start()


@contextmanager
def redis_server(port: int) -> Iterator[str]:
    """A private throwaway redis-server on `port` (never the shared one); yields its URL."""
    with running(RedisServer(port)) as server:
        yield server.url


class PostgresCluster:
    """A private PostgreSQL cluster (initdb in a temporary directory) on a free loopback port; restartable.

    Never the shared server: chaos tests restart this one. initdb and pg_ctl refuse to run as
    root, so they run as the `postgres` user when we are root. The nodes-apart test runs one on `host`
    in the network namespace `netns`, trusting the clients of `trusted_network` (CIDR) too.
    """

    BIN_DIR = Path(os.environ.get("POSTGRES_BIN_DIR", "/usr/lib/postgresql/15/bin"))

    def __init__(
        self, *, host: str = "127.0.0.1", port: int | None = None, netns: str | None = None, trusted_network: str = ""
    ) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="pgcluster-"))
        self.data = self.directory / "data"
        self.host, self.netns, self.trusted_network = host, netns, trusted_network
        self.port = port or free_port()
        self.log_path = self.directory / "postgres.log"  # inside the directory the postgres user owns

    def url(self, name: str = "postgres") -> str:
        return f"postgres://postgres@{self.host}:{self.port}/{name}"

    def _run(self, *command: str) -> None:
        in_netns = ["ip", "netns", "exec", self.netns] if self.netns else []
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        subprocess.run(
            [*in_netns, *as_postgres, *command], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )

    def start(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        self._run(str(self.BIN_DIR / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres")
        if self.trusted_network:
            with open(self.data / "pg_hba.conf", "a") as hba:
                hba.write(f"host all all {self.trusted_network} trust\n")
        self.pg_ctl("start")

    def pg_ctl(self, action: str) -> None:
        """`start`, `stop` or `restart` (fast: open connections are cut, as in a crash or failover)."""
        options = f"-p {self.port} -k {self.directory} -c listen_addresses={self.host} -c fsync=off"
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


class PgBouncer(ChildProcess):
    """Debian's pgbouncer in transaction pooling mode on a free loopback port, in front of the PostgreSQL
    of `database_url`: at most `pool_size` server connections for its database, however many clients.

    pgbouncer refuses to run as root, so it runs as the `postgres` user when we are root. `admin` reads
    its console (SHOW POOLS, SHOW STATS, ...)."""

    BINARY = "/usr/sbin/pgbouncer"

    def __init__(self, database_url: str, *, pool_size: int) -> None:
        target = urlsplit(database_url)
        self.port, self.user, self.database = free_port(), target.username or "postgres", target.path.lstrip("/")
        self.directory = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
        (self.directory / "userlist.txt").write_text(f'"{self.user}" ""\n')
        config = self.directory / "pgbouncer.ini"
        config.write_text(
            "[databases]\n"
            f"{self.database} = host={target.hostname} port={target.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.directory / 'userlist.txt'}\nadmin_users = {self.user}\n"
            f"pool_mode = transaction\ndefault_pool_size = {pool_size}\nreserve_pool_size = 0\n"
            "max_client_conn = 1000\n"
        )
        if os.geteuid() == 0:
            shutil.chown(self.directory, "postgres", "postgres")
        as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        super().__init__(
            [*as_postgres, self.BINARY, str(config)],
            name="pgbouncer",
            env=dict(os.environ),
            ready=lambda: _accepts_connections(self.port),
            ready_timeout=10,
        )

    @property
    def url(self) -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{self.database}"

    def admin(self, command: str) -> list[dict[str, object]]:
        """The rows of an admin console command (the console speaks only the simple query protocol, which
        psycopg uses for a statement without parameters)."""
        import psycopg
        from psycopg.rows import dict_row

        with psycopg.connect(
            host="127.0.0.1", port=self.port, user=self.user, dbname="pgbouncer", autocommit=True
        ) as conn:
            return conn.cursor(row_factory=dict_row).execute(command).fetchall()  # type: ignore[return-value]

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.directory, ignore_errors=True)


class PoolWatch:
    """Samples pgbouncer's SHOW POOLS for its database every 50 ms while it runs: the most server connections
    (in any state) and client connections it saw at once."""

    def __init__(self, bouncer: PgBouncer) -> None:
        self.bouncer, self.servers, self.clients = bouncer, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        while not self._stop.wait(0.05):
            pools = [row for row in self.bouncer.admin("SHOW POOLS") if row["database"] == self.bouncer.database]
            if not pools:  # no client has connected yet
                continue
            [pool] = pools
            servers = sum(int(pool[state]) for state in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login"))
            self.servers = max(self.servers, servers)
            self.clients = max(self.clients, int(pool["cl_active"]) + int(pool["cl_waiting"]))

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def self_signed_certificate(directory: Path, *, host: str = "localhost") -> tuple[Path, Path]:
    """A fresh self-signed certificate for `host` (and 127.0.0.1) and its key, as PEM files in `directory`:
    what the servers under test (and a relay standing in for a stock Postfix) are given."""
    from mailservice.tls import self_signed_certificate as made

    return made(directory, host=host)


def _accepts_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@contextmanager
def submission_smtp_server(*, implicit_tls: bool = False, **env: str) -> Iterator[int]:
    """`manage.py run_submission_smtp` on a free loopback port; yields the port. Give it TLS files in `env`."""
    command = [sys.executable, "manage.py", "run_submission_smtp", "--host", "127.0.0.1", "--port", "{port}"]
    ready = _accepts_connections if implicit_tls else serves_smtp
    with child_server(
        [*command, *(["--implicit-tls"] if implicit_tls else [])], name="submission", ready=ready, env=env
    ) as child:
        yield child.port


def procfile_web_line() -> str:
    """The Procfile's `web` command, as `make start` runs it (config/start.py)."""
    lines = (ROOT / "Procfile").read_text().splitlines()
    return next(line.partition(":")[2].strip() for line in lines if line.startswith("web:"))


@contextmanager
def procfile_web(**env: str) -> Iterator[int]:
    """The Procfile's web line run by a shell, as `make start` runs it (the venv's commands on
    PATH), on a free $PORT; yields the port."""
    port = free_port()
    environment = child_env(**{"WEB_CONCURRENCY": "2", **env}, PORT=str(port), PATH=f"{BIN}:{os.environ['PATH']}")
    child = ChildProcess(
        ["/bin/sh", "-c", f"exec {procfile_web_line()}"],
        name="procfile-web",
        env=environment,
        ready=lambda: answers_http(f"http://127.0.0.1:{port}/healthz"),
        ready_timeout=60,
        log_path=LOG_DIR / f"procfile-web-{port}.log",
    )
    with running(child):
        yield port

"""The one way live tests run a child process: `ChildProcess`.

Started in its own session (so stopping it stops its children too: gunicorn's workers, a Celery
pool, an embedded beat), its output in a log file under var/, waited for until it answers, and
stopped with SIGTERM (SIGKILL if it does not exit). When a test fails, the tail of the log of
every child it ran is attached to the report (tests/harness/plugin.py).
"""

import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOG_DIR = ROOT / "var"  # the child processes' logs
LOG_DIR.mkdir(exist_ok=True)

STOP_TIMEOUT = 15  # seconds a child gets to exit on SIGTERM before SIGKILL


# The ports of the servers tests start: below the kernel's ephemeral range (32768-60999 here, so no client
# socket's port lands among them) and a block per pytest-xdist worker, so between a port's pick and its
# server's bind no other worker can pick it. With the kernel's picks, two workers once got the same port: one's
# server answered the other's readiness probe, and the other's test talked to a stranger's server.
PORT_BLOCK_SIZE = 2000
PORT_FIRST = 12000
_port_offsets = itertools.count(random.randrange(PORT_BLOCK_SIZE))


def _port_block() -> int:
    """This worker's block; a child process of a test (the bench, the soak) inherits its worker's, which
    tests/settings.py puts in MAILSERVICE_TEST_PORT_BLOCK."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    return int(worker.removeprefix("gw")) if worker else int(os.environ.get("MAILSERVICE_TEST_PORT_BLOCK", "0"))


def free_port() -> int:
    """A port of this worker's block that nothing holds on 127.0.0.1, taken in turn (a port just given back
    may linger in TIME_WAIT)."""
    first = PORT_FIRST + _port_block() * PORT_BLOCK_SIZE
    for _ in range(PORT_BLOCK_SIZE):
        port = first + next(_port_offsets) % PORT_BLOCK_SIZE
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port among {first}-{first + PORT_BLOCK_SIZE - 1}")


def wait_until(
    predicate: Callable[[], Any], *, timeout: float, interval: float = 0.05, message: str = "condition"
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


class ChildProcess:
    """A child process of a live test; restartable (`start` after `stop`) for chaos tests.

    `ready` is polled by `wait_ready` until it is true (and the process still runs), which `start`
    does unless `wait_on_start` is off; None means started is ready. The log is appended to across
    restarts.
    """

    # Every ChildProcess ever started in this test session, for the failure report.
    started: list["ChildProcess"] = []

    def __init__(
        self,
        command: list[str],
        *,
        name: str,
        env: dict[str, str],
        ready: Callable[[], bool] | None = None,
        ready_timeout: float = 30,
        wait_on_start: bool = True,
        log_path: Path | None = None,
        netns: str | None = None,
    ) -> None:
        # In a network namespace (tests/harness/netns.py), the command runs under `ip netns exec`, which
        # execs it: the process (and its group) is still the one `stop` signals.
        self.command = ["ip", "netns", "exec", netns, *command] if netns else command
        self.name, self.env = name, env
        self.ready, self.ready_timeout, self.wait_on_start = ready, ready_timeout, wait_on_start
        self.log_path = log_path or LOG_DIR / f"{name}-{os.getpid()}-{free_port()}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.stopped_at: float | None = None

    def start(self) -> None:
        log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 - the child holds its own copy
        with log:
            self.process = subprocess.Popen(
                self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.stopped_at = None
        if self not in ChildProcess.started:
            ChildProcess.started.append(self)
        if self.wait_on_start:
            self.wait_ready()

    @property
    def pid(self) -> int:
        assert self.process is not None, f"{self.name} is not running"
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ready(self, timeout: float | None = None) -> None:
        ready = self.ready or (lambda: True)
        try:
            wait_until(
                lambda: self.alive() and ready(),
                timeout=timeout or self.ready_timeout,
                message=f"{self.name} to be ready (log: {self.log_path})",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- last lines of {self.log_path.name} ---\n{self.log_tail()}") from None

    def wait(self, timeout: float) -> int | None:
        """Wait for a child that runs to completion; its exit status, or None if it still runs."""
        assert self.process is not None, f"{self.name} is not running"
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, *, sig: int = signal.SIGTERM) -> None:
        """Signal the process group and reap it; SIGKILL if it has not exited in STOP_TIMEOUT seconds."""
        if self.process is None:
            return
        with suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            with suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self.process, self.stopped_at = None, time.monotonic()

    def kill(self) -> None:
        """SIGKILL, as the OOM killer or a power cut would: no cleanup, no acknowledgement."""
        self.stop(sig=signal.SIGKILL)

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_bytes().decode("utf-8", "replace")
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __enter__(self) -> "ChildProcess":
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

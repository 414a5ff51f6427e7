"""`make start` (config/start.py): the Procfile's processes (on 8000, 2525 and 2587 unless PORT, INBOUND_PORT
and SUBMISSION_PORT say otherwise: here free ports, so a running `make run` is no obstacle); one that cannot
start is named, and the others keep running until Ctrl-C stops them all."""

import os
import signal
import socket
import subprocess
import time

import httpx
import pytest

from tests.harness.env import child_env
from tests.harness.process import ROOT, free_port

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

PORT, INBOUND_PORT, SUBMISSION_PORT = free_port(), free_port(), free_port()


def _answers() -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{PORT}/healthz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def _read_until(stream, needle: str, deadline: float) -> str:
    seen = ""
    os.set_blocking(stream.fileno(), False)
    while needle not in seen and time.monotonic() < deadline:
        chunk = stream.read()
        seen += chunk.decode("utf-8", "replace") if chunk else ""
        time.sleep(0.1)
    return seen


def test_serves_names_the_process_that_failed_and_keeps_the_others():
    env = child_env(
        REDIS_URL=os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"),
        PORT=str(PORT),
        INBOUND_PORT=str(INBOUND_PORT),
        SUBMISSION_PORT=str(SUBMISSION_PORT),
    )
    with socket.socket() as taken:  # the inbound server's port is in use: it exits at start-up
        taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taken.bind(("127.0.0.1", INBOUND_PORT))
        taken.listen()
        make = subprocess.Popen(
            ["make", "--no-print-directory", "start"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            output = _read_until(make.stdout, "start: inbound exited with status", time.monotonic() + 60)
            assert "start: inbound exited with status 1" in output, output[-3000:]
            deadline = time.monotonic() + 60
            while not _answers() and time.monotonic() < deadline:
                time.sleep(0.3)
            assert _answers(), f"the web process is not serving on {PORT} after inbound failed"
            time.sleep(2)
            assert _answers() and make.poll() is None, "the others were stopped with the failed one"
        finally:
            os.killpg(make.pid, signal.SIGINT)
            rest = make.communicate(timeout=60)[0].decode("utf-8", "replace")
    assert "start: web stopped" in rest and "start: worker stopped" in rest, rest[-3000:]
    assert not _answers()

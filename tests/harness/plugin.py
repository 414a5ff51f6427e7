"""The harness as pytest fixtures, and the logs of the children of a failed test in its report.

It also keeps `make test-quick` honest: a test that starts a process (a server, a command, a browser) fails
unless it carries one of OWN_PROCESS_MARKS, the marks test-quick leaves out.
"""

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.process import ChildProcess
from tests.harness.servers import inbound_smtp_server, web_server
from tests.harness.smtp import SmtpSink, smtp_sink


@pytest.fixture
def live_web(transactional_db: None) -> Iterator[str]:
    """gunicorn on the test database for one test; its base URL."""
    with web_server() as base_url:
        yield base_url


@pytest.fixture
def live_inbound(transactional_db: None) -> Iterator[int]:
    """`manage.py run_inbound_smtp` on the test database for one test; its port."""
    with inbound_smtp_server() as port:
        yield port


@pytest.fixture
def live_sink() -> Iterator[SmtpSink]:
    """A recording SMTP server (the relay the workers deliver to) for one test."""
    with smtp_sink() as sink:
        yield sink


# The marks of tests that start processes of their own (pyproject.toml's markers); `make test-quick` runs
# every test without one of them.
OWN_PROCESS_MARKS = frozenset({"live", "browser", "soak", "namespaces"})
_running: list[pytest.Item] = []  # the test whose set-up, call or teardown runs now


def _refuse_unmarked_processes(event: str, args: tuple[Any, ...]) -> None:
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.fork") or not _running:
        return
    item = _running[0]
    if OWN_PROCESS_MARKS.isdisjoint(mark.name for mark in item.iter_markers()):
        started = args[1] if event == "subprocess.Popen" else event
        raise RuntimeError(
            f"{item.nodeid} starts a process ({started!r}) but has none of the marks "
            f"{sorted(OWN_PROCESS_MARKS)}: mark it, so that make test-quick leaves it out"
        )


sys.addaudithook(_refuse_unmarked_processes)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.stash[_STARTED] = time.monotonic()
    _running[:] = [item]
    yield
    _running.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    since = item.stash.get(_STARTED, 0.0)
    for child in ChildProcess.started:
        if child.stopped_at is None or child.stopped_at >= since:  # running, or ran during this test
            report.sections.append((f"{child.name} log ({child.log_path})", child.log_tail()))


_STARTED = pytest.StashKey[float]()

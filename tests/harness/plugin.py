"""The harness as pytest fixtures, and the logs of the children of a failed test in its report."""

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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    item.stash[_STARTED] = time.monotonic()
    yield


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

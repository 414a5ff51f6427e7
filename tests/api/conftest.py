from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import web_server


@pytest.fixture(scope="module")
def live_url(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """One gunicorn per module; each (transactional) test commits the rows it then reads over HTTP."""
    with django_db_blocker.unblock(), web_server() as base_url:
        yield base_url


@pytest.fixture
def http(live_url: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live_url, timeout=30) as client:
        yield client

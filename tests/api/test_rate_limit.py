"""MAILSERVICE_RATE_LIMIT per client IP, shared by every gunicorn worker through Redis, before auth."""

import os
from collections.abc import Iterator

import httpx
import pytest
from django.core.cache import cache

from tests.api.wire import assert_api_error, bearer
from tests.harness import web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

LIMIT = 5
PROXY = "127.0.0.2"  # a second loopback address, trusted as a reverse proxy


@pytest.fixture(scope="module")
def limited_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    # With Redis the two workers share one counter; without it each worker would count alone.
    workers = 2 if os.environ.get("REDIS_URL") else 1
    # An hour's window, so the run cannot straddle a window boundary and start afresh.
    with (
        django_db_blocker.unblock(),
        web_server(
            workers=workers, MAILSERVICE_RATE_LIMIT=f"{LIMIT}/h", MAILSERVICE_TRUSTED_PROXIES=f"{PROXY}/32"
        ) as base_url,
    ):
        yield base_url


@pytest.fixture
def fresh_counters(limited_url) -> str:
    cache.clear()  # the start-up probes counted too
    return limited_url


def _client(base_url: str, source: str = "127.0.0.1") -> httpx.Client:
    """A client from `source`, opening a connection per request so both workers get a share."""
    transport = httpx.HTTPTransport(local_address=source, limits=httpx.Limits(max_keepalive_connections=0))
    return httpx.Client(base_url=base_url, transport=transport, timeout=10)


def test_the_limit_is_counted_before_authentication_and_answered_with_retry_after(fresh_counters, full_key):
    with _client(fresh_counters) as client:
        unauthenticated = [client.get("/v1/messages").status_code for _ in range(LIMIT)]
        limited = client.get("/v1/messages", headers=bearer(full_key))
        also_limited = client.post("/v1/send", json={})

    assert unauthenticated == [401] * LIMIT
    for response in (limited, also_limited):
        assert_api_error(response, 429, "RateLimited")
        assert 1 <= int(response.headers["retry-after"]) <= 3600


def test_x_forwarded_for_is_ignored_from_a_peer_that_is_not_a_trusted_proxy(fresh_counters):
    with _client(fresh_counters) as client:
        statuses = [
            client.get("/v1/messages", headers={"X-Forwarded-For": f"203.0.113.{n}"}).status_code
            for n in range(LIMIT + 1)
        ]
    assert statuses == [401] * LIMIT + [429]


def test_x_forwarded_for_names_the_client_behind_a_trusted_proxy(fresh_counters):
    with _client(fresh_counters, source=PROXY) as proxy:
        first = [
            proxy.get("/v1/messages", headers={"X-Forwarded-For": "203.0.113.7"}).status_code for _ in range(LIMIT)
        ]
        first_again = proxy.get("/v1/messages", headers={"X-Forwarded-For": "203.0.113.7"})
        # A client cannot escape by prepending its own X-Forwarded-For: the proxy's entry is the last one.
        spoofed = proxy.get("/v1/messages", headers={"X-Forwarded-For": "198.51.100.1, 203.0.113.7"})
        second = proxy.get("/v1/messages", headers={"X-Forwarded-For": "203.0.113.8"})
    with _client(fresh_counters) as direct:
        not_behind_the_proxy = direct.get("/v1/messages")

    assert first == [401] * LIMIT
    assert_api_error(first_again, 429, "RateLimited")
    assert_api_error(spoofed, 429, "RateLimited")
    assert (second.status_code, not_behind_the_proxy.status_code) == (401, 401)


def test_failures_are_not_forgotten_at_a_window_boundary(monkeypatch):
    """A fixed window forgot every failure at its end: 2 guesses just before a minute ended and 2 just after
    passed a limit of 3 a minute. Failures count over the current and the previous window."""
    from mailservice import ratelimit

    clock = [6_000_000 * 60 + 59.5]  # half a second before a minute ends
    monkeypatch.setattr(ratelimit.time, "time", lambda: clock[0])
    for _ in range(2):
        ratelimit.failure_counted(group="boundary", keys=["203.0.113.9"], rate="3/m")
    clock[0] += 1.0  # the next minute
    assert ratelimit.failures_wait(group="boundary", keys=["203.0.113.9"], rate="3/m") is None
    ratelimit.failure_counted(group="boundary", keys=["203.0.113.9"], rate="3/m")

    assert ratelimit.failures_wait(group="boundary", keys=["203.0.113.9"], rate="3/m") == 60
    assert ratelimit.failures_wait(group="boundary", keys=["198.51.100.1"], rate="3/m") is None

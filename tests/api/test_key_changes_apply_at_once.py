"""Web processes cache the keys they authenticated (apikeys/cache.py); a change made through the
services the console uses applies to the very next request, whichever web process answers it."""

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from apikeys.models import ApiKey
from apikeys.services import apikey_revoke
from domains.services import domain_set_allowance, sending_pause, sending_resume
from tests.api.wire import assert_api_error, bearer, inline_body
from tests.harness import web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

# Each request on a connection of its own, so both workers answer some; enough of them that both
# have the key cached before the change, and both answer after it.
REQUESTS = 8


@pytest.fixture(scope="module")
def two_workers(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    with django_db_blocker.unblock(), web_server(workers=2) as base_url:
        yield base_url


def _sends(base_url: str, api_key: ApiKey) -> list[httpx.Response]:
    transport = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    with httpx.Client(base_url=base_url, transport=transport, timeout=10) as client:
        return [client.post("/v1/send", json=inline_body(), headers=bearer(api_key)) for _ in range(REQUESTS)]


def _unverify(api_key: ApiKey) -> None:
    domain = api_key.domain
    domain.verified = False
    domain.save(update_fields=["verified", "updated_at"])


def _without_send_permission(api_key: ApiKey) -> None:
    api_key.can_send = False
    api_key.save(update_fields=["can_send", "updated_at"])


def _no_allowance(api_key: ApiKey) -> None:
    domain_set_allowance(domain=api_key.domain, allowance=0)


@pytest.mark.parametrize(
    ("change", "status", "code"),
    [
        pytest.param(lambda key: apikey_revoke(api_key=key), 401, "Unauthorized", id="revoked"),
        pytest.param(lambda key: sending_pause(domain=key.domain, actor="ops"), 503, "SendingPaused", id="paused"),
        pytest.param(lambda key: sending_pause(domain=None, actor="ops"), 503, "SendingPaused", id="global-pause"),
        pytest.param(_unverify, 400, "DomainNotVerified", id="unverified"),
        pytest.param(_without_send_permission, 403, "MissingPermission", id="permission-removed"),
        pytest.param(_no_allowance, 429, "AllowanceExhausted", id="allowance-used-up"),
    ],
)
def test_a_change_applies_to_the_next_request_on_every_web_process(
    two_workers: str, full_key: ApiKey, change: Callable[[ApiKey], Any], status: int, code: str
) -> None:
    before = _sends(two_workers, full_key)
    try:
        change(ApiKey.objects.select_related("domain").get(pk=full_key.pk))
        after = _sends(two_workers, full_key)
    finally:
        sending_resume(domain=None)

    assert [response.status_code for response in before] == [200] * REQUESTS
    for response in after:
        assert_api_error(response, status, code)

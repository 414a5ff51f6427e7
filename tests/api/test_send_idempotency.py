"""POST /v1/send with an Idempotency-Key: replayed, refused when reused or in flight, per domain, 24 h."""

import threading
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from apikeys.models import ApiKey
from domains.models import DailyUsage, Domain
from messaging.idempotency import idempotency_purge, request_hash
from messaging.models import IdempotencyKey, IdempotencyState, Message
from tests.api.wire import assert_api_error, bearer, inline_body
from tests.conftest import client_for
from tests.factories import ApiKeyFactory
from tests.harness import web_server

KEY = {"HTTP_IDEMPOTENCY_KEY": "order-1234/confirmation"}


@pytest.mark.django_db
def test_the_same_key_and_body_replays_the_first_response_without_a_second_message(api):
    first = api.post("/v1/send", inline_body(), format="json", **KEY)
    again = api.post("/v1/send", {**inline_body()}, format="json", **KEY)

    assert first.status_code == again.status_code == 200
    assert again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true" and "Idempotent-Replayed" not in first.headers
    assert Message.objects.count() == 1


@pytest.mark.django_db
def test_the_same_key_with_another_body_is_refused(api):
    api.post("/v1/send", inline_body(), format="json", **KEY)
    response = api.post("/v1/send", inline_body(subject="Other"), format="json", **KEY)

    assert_api_error(response, 409, "IdempotencyKeyReused")
    assert Message.objects.count() == 1


@pytest.mark.django_db
def test_a_key_still_in_flight_is_refused(api, domain):
    IdempotencyKey.objects.create(
        domain=domain,
        key=KEY["HTTP_IDEMPOTENCY_KEY"],
        request_hash=request_hash(inline_body()),
        state=IdempotencyState.IN_FLIGHT,
        expires_at=timezone.now() + timedelta(seconds=60),
    )
    response = api.post("/v1/send", inline_body(), format="json", **KEY)

    assert_api_error(response, 409, "IdempotencyKeyInFlight")
    assert Message.objects.count() == 0


@pytest.mark.django_db
def test_a_failed_send_does_not_use_up_the_key(api, domain):
    Domain.objects.filter(pk=domain.pk).update(verified=False)
    assert_api_error(api.post("/v1/send", inline_body(), format="json", **KEY), 400, "DomainNotVerified")

    Domain.objects.filter(pk=domain.pk).update(verified=True)
    response = api.post("/v1/send", inline_body(), format="json", **KEY)
    assert response.status_code == 200 and "Idempotent-Replayed" not in response.headers


@pytest.mark.django_db
def test_keys_are_per_domain_and_expire(api, other_domain_key):
    api.post("/v1/send", inline_body(), format="json", **KEY)
    other = client_for(other_domain_key).post(
        "/v1/send", inline_body(**{"from": "a@other.example.net"}), format="json", **KEY
    )
    assert other.status_code == 200 and "Idempotent-Replayed" not in other.headers

    IdempotencyKey.objects.update(expires_at=timezone.now())
    assert idempotency_purge() == 2
    assert api.post("/v1/send", inline_body(), format="json", **KEY).headers.get("Idempotent-Replayed") is None
    assert Message.objects.count() == 3


@pytest.mark.django_db
@pytest.mark.parametrize("first_is_test", [True, False], ids=["test key first", "live key first"])
def test_a_test_key_and_a_live_key_never_share_an_idempotency_key(domain, first_is_test):
    test_key = ApiKeyFactory(domain=domain)
    ApiKey.objects.filter(pk=test_key.pk).update(is_test=True)
    test_api, live_api = client_for(test_key), client_for(ApiKeyFactory(domain=domain))
    first, second = (test_api, live_api) if first_is_test else (live_api, test_api)

    earlier = first.post("/v1/send", inline_body(), format="json", **KEY)
    later = second.post("/v1/send", inline_body(), format="json", **KEY)

    assert earlier.status_code == later.status_code == 200
    assert "Idempotent-Replayed" not in later.headers
    assert later.json()["id"] != earlier.json()["id"]
    assert Message.objects.get(public_id=later.json()["id"]).is_test is not first_is_test
    assert DailyUsage.objects.get().sent_count == 1  # the live send, counted as sent
    replayed = second.post("/v1/send", inline_body(), format="json", **KEY)
    assert replayed.headers["Idempotent-Replayed"] == "true" and replayed.json() == later.json()


@pytest.mark.django_db
@pytest.mark.parametrize("key", ["", "x" * 257, "caf\u00e9", "tab\there"])
def test_a_malformed_key_is_a_validation_error(api, key):
    assert_api_error(
        api.post("/v1/send", inline_body(), format="json", HTTP_IDEMPOTENCY_KEY=key), 400, "ValidationError"
    )


@pytest.mark.django_db
def test_a_key_of_256_printable_characters_is_accepted(api):
    assert api.post("/v1/send", inline_body(), format="json", HTTP_IDEMPOTENCY_KEY=" ~" * 128).status_code == 200


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_with_one_key_make_exactly_one_message():
    key = ApiKeyFactory(domain=Domain.objects.create(name="acme.example.com", verified=True))
    responses: list[httpx.Response] = []
    with web_server(workers=4) as base_url:
        barrier = threading.Barrier(8)

        def post() -> None:
            barrier.wait()
            headers = bearer(key) | {"Idempotency-Key": "concurrent-1"}
            responses.append(httpx.post(f"{base_url}/v1/send", json=inline_body(), headers=headers, timeout=30))

        threads = [threading.Thread(target=post) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    assert Message.objects.count() == 1
    ok = [r for r in responses if r.status_code == 200]
    assert {r.json()["id"] for r in ok} == {Message.objects.get().public_id}
    assert all(r.status_code == 200 or r.json()["error"]["code"] == "IdempotencyKeyInFlight" for r in responses)

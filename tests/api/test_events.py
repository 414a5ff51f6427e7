"""GET /v1/messages/{id}/events and GET /v1/events: each event exactly its webhook's body with the webhook's
id, oldest first, paging, filters, and the domain and side a key is confined to."""

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from apikeys.models import Permission
from messaging.models import EventType, MessageEvent
from tests.api.wire import all_pages, assert_api_error, page_items
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, DomainFactory, MessageEventFactory, MessageFactory
from webhooks import services
from webhooks.models import WebhookDelivery

pytestmark = pytest.mark.django_db


def _events(domain, count: int, *, is_test: bool = False, type_: str = EventType.DELIVERED) -> list[MessageEvent]:
    """`count` events of one message each, the first one oldest, a second apart, after those made before."""
    start = timezone.now() - timedelta(hours=1) + timedelta(seconds=MessageEvent.objects.count())
    made = []
    for index in range(count):
        message = MessageFactory(domain=domain, is_test=is_test)
        event = MessageEventFactory(message=message, type=type_)
        MessageEvent.objects.filter(pk=event.pk).update(created_at=start + timedelta(seconds=index))
        event.refresh_from_db()
        made.append(event)
    return made


def _ids(response) -> list[str]:
    return page_items(response)


def _all_pages(api, **params) -> list[str]:
    return all_pages(api, "/v1/events", **params)


# --- a message's events --------------------------------------------------------------------------------------------


def test_a_messages_events_are_its_webhooks_bodies_with_their_webhook_ids(api, domain):
    services.endpoint_create(domain=domain, url="http://127.0.0.1:9/hooks", event_types=[])
    message = MessageFactory(domain=domain)
    for type_ in (EventType.ACCEPTED, EventType.HELD, EventType.DELIVERED):
        MessageEventFactory(
            message=message, type=type_, recipient="" if type_ != EventType.DELIVERED else "rcpt@example.org"
        )
    services.events_fan_out()

    response = api.get(f"/v1/messages/{message.public_id}/events")

    assert response.status_code == 200 and set(response.json()) == {"data"}
    sent = {d.event_id: json.loads(d.payload) for d in WebhookDelivery.objects.order_by("subject_created_at", "id")}
    assert response.json()["data"] == list(sent.values())  # the held event is history only, as for webhooks
    assert [event["type"] for event in response.json()["data"]] == ["email.accepted", "email.delivered"]


def test_an_event_keeps_its_id_and_body_however_often_it_is_read(api, domain):
    message = MessageFactory(domain=domain)
    MessageEventFactory(message=message)

    first, second = (api.get(f"/v1/messages/{message.public_id}/events").json() for _ in range(2))

    assert first == second and first["data"][0]["id"].startswith("evt_")


@pytest.mark.parametrize("owner", ["other domain", "test side"])
def test_a_message_of_another_domain_or_side_is_a_404(api, domain, owner):
    message = MessageFactory(
        **({"domain": DomainFactory()} if owner == "other domain" else {"domain": domain, "is_test": True})
    )
    MessageEventFactory(message=message)

    assert_api_error(api.get(f"/v1/messages/{message.public_id}/events"), 404, "NotFound")


def test_a_message_id_past_the_limit_is_a_validation_error(api, domain):
    assert_api_error(api.get(f"/v1/messages/{'m' * 257}/events"), 400, "ValidationError")
    assert_api_error(api.get("/v1/messages/msg_x/events?limit=5"), 400, "ValidationError")


# --- the domain's stream -------------------------------------------------------------------------------------------


def test_the_stream_is_oldest_first_twenty_by_default_and_pages_follow_without_gaps(api, domain):
    made = [event.public_id for event in _events(domain, 45)]

    first = api.get("/v1/events")
    assert _ids(first) == made[:20] and first.json()["has_more"] is True
    assert _all_pages(api, limit="7") == made


def test_events_of_the_same_moment_page_by_their_order_of_writing(api, domain):
    made = _events(domain, 5)
    MessageEvent.objects.filter(pk__in=[event.pk for event in made]).update(created_at=timezone.now())
    for event in made:
        event.refresh_from_db()

    assert _all_pages(api, limit="2") == [event.public_id for event in made]


def test_type_filters_repeat_and_since_bounds_the_start(api, domain):
    delivered = _events(domain, 3)
    bounced = _events(domain, 2, type_=EventType.BOUNCED)
    complained = _events(domain, 2, type_=EventType.COMPLAINED)
    _events(domain, 2, type_=EventType.HELD)  # never published

    assert _all_pages(api) == [event.public_id for event in delivered + bounced + complained]
    both = api.get("/v1/events?type=email.bounced&type=email.complained")
    assert _ids(both) == [event.public_id for event in bounced + complained]
    since = delivered[2].created_at.isoformat()
    assert _ids(api.get("/v1/events", {"since": since, "type": "email.delivered"})) == [delivered[2].public_id]


def test_a_cursor_only_continues_the_filters_it_was_made_with(api, domain):
    _events(domain, 3)
    cursor = api.get("/v1/events", {"limit": "1", "type": "email.delivered"}).json()["next_cursor"]

    assert_api_error(api.get("/v1/events", {"after": cursor}), 400, "InvalidCursor")
    assert len(_ids(api.get("/v1/events", {"after": cursor, "type": "email.delivered"}))) == 2


def test_another_domains_events_are_absent_and_its_cursors_refused(api, domain):
    other = DomainFactory(name="other.example.net")
    _events(other, 3)
    mine = _events(domain, 1)
    cursor = client_for(ApiKeyFactory(domain=other)).get("/v1/events", {"limit": "1"}).json()["next_cursor"]

    assert _all_pages(api) == [mine[0].public_id]
    assert_api_error(api.get("/v1/events", {"after": cursor}), 400, "InvalidCursor")


def test_a_test_key_sees_only_test_messages_events_and_a_live_key_only_live_ones(api, domain):
    live, sandbox = _events(domain, 2), _events(domain, 2, is_test=True)
    test_key = client_for(ApiKeyFactory(domain=domain, is_test=True))

    assert _all_pages(test_key) == [event.public_id for event in sandbox]
    assert _all_pages(api) == [event.public_id for event in live]
    assert all(event["test"] for event in test_key.get("/v1/events").json()["data"])


def test_reading_events_needs_email_read(domain, send_only_key):
    _events(domain, 1)
    message = MessageFactory(domain=domain)

    for path in ("/v1/events", f"/v1/messages/{message.public_id}/events"):
        assert (
            "email.read" in assert_api_error(client_for(send_only_key).get(path), 403, "MissingPermission")["message"]
        )
    assert_api_error(client_for(None).get("/v1/events"), 401, "Unauthorized")


def test_a_page_costs_the_same_number_of_queries_whatever_its_size(api, domain, django_assert_max_num_queries):
    _events(domain, 40)

    with django_assert_max_num_queries(4):  # the key, the page, its messages with their domain
        assert len(_ids(api.get("/v1/events", {"limit": "40"}))) == 40


def test_events_written_by_every_path_carry_their_domain_and_side(domain):
    """The stream reads event_stream_idx: an event without its domain would be missing from it."""
    test_key = ApiKeyFactory(domain=domain, is_test=True, permissions=(Permission.SEND, Permission.READ))
    for key in (ApiKeyFactory(domain=domain), test_key):
        body = {"from": f"a@{domain.name}", "to": "b@example.org", "subject": "s", "text": "t"}
        assert client_for(key).post("/v1/send", body, format="json").status_code == 200
        assert client_for(key).post("/v1/send/batch", {"messages": [body, body]}, format="json").status_code == 200

    events = MessageEvent.objects.select_related("message")
    assert events.count() == 6
    assert all((e.domain_id, e.is_test) == (e.message.domain_id, e.message.is_test) for e in events)


@pytest.mark.parametrize(
    ("query", "code"),
    [
        ("type=email.nope", "ValidationError"),
        ("type=domain.dmarc_report", "ValidationError"),
        ("type=", "ValidationError"),
        ("since=yesterday", "ValidationError"),
        ("since=2026-13-01T00:00:00Z", "ValidationError"),
        ("limit=0", "ValidationError"),
        ("limit=101", "ValidationError"),
        ("limit=1&limit=2", "ValidationError"),
        ("direction=sent", "ValidationError"),
        ("after=forged", "InvalidCursor"),
        ("after=" + "a" * 513, "ValidationError"),
    ],
)
def test_bad_query_parameters_are_refused(api, domain, query, code):
    assert_api_error(api.get(f"/v1/events?{query}"), 400, code)

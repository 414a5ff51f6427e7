"""Webhook replay (`manage.py replay_webhooks`, webhooks_replay): after an endpoint's outage every event of
the window arrives once per webhook-id, signed now and verified with the standardwebhooks library, through
the normal delivery path; and the command's refusals."""

import os
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from messaging.models import EventType, MessageEvent
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, MessageEventFactory, MessageFactory
from webhooks import replay, services
from webhooks.models import DeliveryStatus, WebhookDelivery
from webhooks.tasks import pump_task

pytestmark = pytest.mark.django_db

EVENTS = int(os.environ.get("REPLAY_EVENTS", "40"))  # the suite's size; `make bench` runs 10,000


def _events_during(
    domain, count: int, *, start: datetime, span: timedelta = timedelta(minutes=50), is_test: bool = False
) -> list[MessageEvent]:
    """`count` events spread over `span` from `start`: deliveries and bounces of `count` messages."""
    made = []
    for index in range(count):
        message = MessageFactory(domain=domain, is_test=is_test)
        kind = EventType.BOUNCED if index % 4 == 0 else EventType.DELIVERED
        event = MessageEventFactory(message=message, type=kind, bounce_type="hard" if kind == EventType.BOUNCED else "")
        MessageEvent.objects.filter(pk=event.pk).update(created_at=start + span * index / count)
        event.refresh_from_db()
        made.append(event)
    return made


def _pump_until(done: Callable[[], bool]) -> None:
    """Pump (fan-out, claims under the concurrency cap, sends) until `done`; bounded."""
    for _ in range(EVENTS + 10):
        pump_task()
        if done():
            return
    raise AssertionError("not done after pumping")


def _pump_until_sent(endpoint) -> None:
    """Pump until nothing of the endpoint is due."""
    due = WebhookDelivery.objects.filter(endpoint=endpoint, status=DeliveryStatus.PENDING)
    _pump_until(lambda: not due.filter(next_attempt_at__lte=timezone.now()).exists())


def test_after_an_outage_a_replay_delivers_every_event_once_per_webhook_id(domain, receiver):
    created = services.endpoint_create(domain=domain, url=receiver.url, event_types=[])
    window_start = timezone.now() - timedelta(hours=1)
    before = _events_during(domain, 3, start=window_start - timedelta(hours=1))
    during = _events_during(domain, EVENTS, start=window_start) + _events_during(
        domain, 4, start=window_start + timedelta(minutes=30), span=timedelta(minutes=1), is_test=True
    )
    # Down for the hour: every attempt refused; each delivery then waits for its next retry.
    receiver.behaviour.statuses = [503] * (3 * (len(before) + len(during)))
    unpublished, untried = MessageEvent.objects.filter(published_at=None), WebhookDelivery.objects.filter(attempts=0)
    _pump_until(lambda: not unpublished.exists() and not untried.exists())
    with receiver.lock:
        receiver.behaviour.statuses.clear()
        refused = len(receiver.requests)
    assert WebhookDelivery.objects.filter(last_status_code=503).count() == len(before) + len(during)
    # An hour of failures in, the schedule's next retries are half an hour to two hours away.
    WebhookDelivery.objects.update(next_attempt_at=timezone.now() + timedelta(minutes=30))

    out, replay_started = StringIO(), int(timezone.now().timestamp())
    call_command("replay_webhooks", created.endpoint.public_id, "--since", window_start.isoformat(), stdout=out)
    _pump_until_sent(created.endpoint)

    assert f"Queued {len(during)} deliveries" in out.getvalue()
    replayed = receiver.requests[refused:]
    verified = receiver.verified(created.secret)[refused:]  # raises unless each one verifies
    counts = Counter(request.headers["webhook-id"] for request in replayed)
    assert set(counts.values()) == {1}
    assert set(counts) == {event.public_id for event in during}
    assert [event["id"] for event in verified] == [request.headers["webhook-id"] for request in replayed]
    # Signed now: the timestamp is the replay's, not the event's (an hour and more before).
    assert all(int(request.headers["webhook-timestamp"]) >= replay_started for request in replayed)
    # The ids are the API's: an application that polled GET /v1/events deduplicates against them.
    reader, api_ids, after = client_for(ApiKeyFactory(domain=domain)), set(), ""
    while after is not None:
        page = reader.get(
            "/v1/events", {"limit": "100", "since": window_start.isoformat(), **({"after": after} if after else {})}
        ).json()
        api_ids |= {event["id"] for event in page["data"]}
        after = page["next_cursor"]
    assert {event.public_id for event in during if not event.is_test} <= api_ids


def test_a_replay_sends_what_the_endpoint_missed_before_it_existed_and_only_the_types_asked(domain, receiver):
    start = timezone.now() - timedelta(minutes=10)
    events = _events_during(domain, 8, start=start, span=timedelta(minutes=5))
    services.events_fan_out()  # published before the endpoint existed: it has no deliveries of them
    created = services.endpoint_create(domain=domain, url=receiver.url, event_types=["email.bounced"])

    queued = replay.webhooks_replay(
        endpoint=created.endpoint, since=start, event_types=["email.bounced", "email.delivered"]
    )
    _pump_until_sent(created.endpoint)

    bounced = [event.public_id for event in events if event.type == EventType.BOUNCED]
    assert queued == len(bounced) == 2
    assert sorted(request.headers["webhook-id"] for request in receiver.requests) == sorted(bounced)
    assert all(event["type"] == "email.bounced" for event in receiver.verified(created.secret))


def test_a_replay_never_reaches_another_domains_events(domain, receiver):
    start = timezone.now() - timedelta(minutes=10)
    other = services.endpoint_create(domain=MessageFactory().domain, url=receiver.url, event_types=[])
    _events_during(domain, 3, start=start, span=timedelta(minutes=5))

    assert replay.webhooks_replay(endpoint=other.endpoint, since=start) == 0


def test_a_delivery_being_sent_is_not_queued_twice(domain, receiver):
    created = services.endpoint_create(domain=domain, url=receiver.url, event_types=[])
    start = timezone.now() - timedelta(minutes=10)
    _events_during(domain, 1, start=start)
    services.events_fan_out()
    [claimed] = services.deliveries_claim(endpoint_id=created.endpoint.pk, limit=1)

    assert replay.webhooks_replay(endpoint=created.endpoint, since=start) == 0
    assert WebhookDelivery.objects.get().lease_expires_at == claimed.lease_expires_at


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["--since", "yesterday"], "is not a date-time"),
        (["--since", "2026-12-04T10:00:00Z", "--until", "2026-12-04T09:00:00Z"], "--until must be after --since"),
        (["--since", "2026-12-04T10:00:00Z", "--type", "email.nope"], "invalid choice"),
        ([], "--since"),
    ],
)
def test_the_command_refuses_bad_windows_and_types(domain, arguments, problem):
    endpoint = services.endpoint_create(domain=domain, url="http://127.0.0.1:9/hooks", event_types=[]).endpoint

    with pytest.raises(CommandError, match=problem):
        call_command("replay_webhooks", endpoint.public_id, *arguments)


def test_the_command_refuses_an_unknown_or_disabled_endpoint(domain):
    endpoint = services.endpoint_create(domain=domain, url="http://127.0.0.1:9/hooks", event_types=[]).endpoint
    endpoint.enabled = False
    endpoint.save()
    since = datetime(2026, 12, 1, tzinfo=UTC).isoformat()

    with pytest.raises(CommandError, match="No webhook endpoint whk_nope"):
        call_command("replay_webhooks", "whk_nope", "--since", since)
    with pytest.raises(CommandError, match="is disabled"):
        call_command("replay_webhooks", endpoint.public_id, "--since", since)

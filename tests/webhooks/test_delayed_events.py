"""`email.delayed` is what the application can act on (issue 40, item 4): a receiver's deferral, at most
once per message per MAILSERVICE_DELAYED_EVENT_INTERVAL; the service's own put-backs (here the
destination hold that a receiver deferring three times in a row starts) stay in the message's
history and publish nothing. Dispatch runs in-process against a real SMTP server (aiosmtpd on
loopback) that defers every DATA; the fan-out is the webhooks worker's."""

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import EventType, Message
from messaging.outbound.dispatch import dispatch_batch
from tests.factories import MessageFactory
from tests.harness import wait_until
from webhooks.models import EventType as WebhookEventType
from webhooks.models import WebhookDelivery
from webhooks.services import endpoint_create, events_fan_out

pytestmark = pytest.mark.django_db

INTERVAL = 1  # seconds
DEFERRALS = 6


def attempt_again(message: Message) -> None:
    """Dispatch the message once more: a deferral's backoff is skipped, a put-back is waited out."""
    message.refresh_from_db()
    if message.events.latest("id").type == EventType.DEFERRED:
        Message.objects.filter(pk=message.pk).update(next_attempt_at=timezone.now())
    else:
        due = message.next_attempt_at
        wait_until(lambda: timezone.now() >= due, timeout=30, message="the destination hold to end")
    dispatch_batch(public_id=message.public_id)
    events_fan_out()


def test_a_receiver_deferring_again_and_again_publishes_one_delayed_event_per_interval(domain, settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    settings.MAILSERVICE_DELAYED_EVENT_INTERVAL = INTERVAL
    settings.MAILSERVICE_DISPATCH_MAX_ATTEMPTS = 100
    settings.MAILSERVICE_DESTINATION_BACKOFF_BASE = 0.25  # the holds end within seconds
    live_sink.behaviour.data_reply = "451 4.3.0 Try again later"
    endpoint_create(domain=domain, url="http://127.0.0.1:9/hooks", event_types=[])
    message = MessageFactory(domain=domain, to=["bob@example.org"], next_attempt_at=timezone.now())
    deferrals = message.events.filter(type=EventType.DEFERRED).order_by("created_at")

    dispatch_batch(public_id=message.public_id)
    events_fan_out()
    first = deferrals.first()
    assert first is not None
    while deferrals.count() < DEFERRALS or timezone.now() < first.created_at + timedelta(seconds=2.5 * INTERVAL):
        attempt_again(message)

    published = WebhookDelivery.objects.filter(message_event__message_id=message.pk)
    delayed = sorted(d.message_event.created_at for d in published.filter(event_type=WebhookEventType.DELAYED))
    assert 2 <= len(delayed) < deferrals.count()
    assert all(later - earlier >= timedelta(seconds=INTERVAL) for earlier, later in itertools.pairwise(delayed))
    assert delayed[0] == first.created_at
    held = message.events.filter(type=EventType.HELD)
    assert held.exists() and all(e.detail.startswith("not sent, no attempt used: ") for e in held)
    assert not published.filter(message_event__type=EventType.HELD).exists()
    assert not message.events.filter(published_at__isnull=True).exists()  # every event was fanned out

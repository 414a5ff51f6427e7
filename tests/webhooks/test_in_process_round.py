"""The round the web process runs without a broker (webhooks/inprocess.py): fan-out, then each due
delivery claimed right before its request, the endpoints in turn."""

import pytest
from django.utils import timezone

from messaging.models import EventType, MessageEvent
from tests.factories import MessageFactory
from tests.webhooks.receiver import webhook_receiver
from webhooks import services
from webhooks.inprocess import deliveries_round
from webhooks.models import DeliveryStatus, WebhookDelivery

pytestmark = pytest.mark.django_db


def test_a_round_sends_every_due_delivery_taking_the_endpoints_in_turn(domain):
    with webhook_receiver() as first, webhook_receiver() as second:
        endpoints = [
            services.endpoint_create(domain=domain, url=receiver.url, event_types=[]).endpoint.pk
            for receiver in (first, second)
        ]
        message = MessageFactory(domain=domain)
        for type_ in (EventType.ACCEPTED, EventType.DELIVERED):
            MessageEvent.objects.create(message=message, type=type_)
        sent = deliveries_round()

    assert sent == 4
    assert [event["type"] for event in first.events()] == ["email.accepted", "email.delivered"]
    assert [event["type"] for event in second.events()] == ["email.accepted", "email.delivered"]
    # The endpoints in turn: each one's first request came before either one's second.
    assert max(r.at for r in (first.requests[0], second.requests[0])) < min(
        r.at for r in (first.requests[1], second.requests[1])
    )
    assert set(WebhookDelivery.objects.values_list("status", "attempts")) == {(DeliveryStatus.SUCCEEDED, 1)}
    assert set(endpoints) == set(WebhookDelivery.objects.values_list("endpoint_id", flat=True))


def test_a_failed_delivery_waits_for_its_retry_instead_of_being_sent_again_in_the_round(domain, receiver):
    services.endpoint_create(domain=domain, url=receiver.url, event_types=[])
    MessageEvent.objects.create(message=MessageFactory(domain=domain), type=EventType.DELIVERED)
    receiver.behaviour.statuses = [500]

    assert deliveries_round() == 1

    delivery = WebhookDelivery.objects.get()
    assert len(receiver.requests) == 1
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.PENDING, 1, 500)
    assert delivery.next_attempt_at > timezone.now() and delivery.lease_expires_at is None
    assert deliveries_round() == 0  # not due yet

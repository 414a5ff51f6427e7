"""Celery tasks for webhooks: thin wrappers around webhooks/services.py.

`webhooks.pump` runs on beat, on the default queue: it fans new events out and claims due
deliveries. `webhooks.deliver` runs on the MAILSERVICE_WEBHOOK_QUEUE queue (the Procfile's
`webhooks` worker), so webhook requests never take a thread that dispatches mail.
"""

import time
from datetime import datetime

from celery import shared_task
from django.conf import settings

from mailservice.locks import single_flight
from webhooks import services
from webhooks.models import WebhookDelivery

# A deliver task keeps taking its endpoint's next due delivery for this long, then yields its thread.
DELIVER_BUDGET_SECONDS = 30.0
# A pump fans out batches for at most this long, so a backlog never holds a thread of the default
# worker (which dispatches mail) for long; the next pump carries on.
PUMP_BUDGET_SECONDS = 1.0


def _enqueue(deliveries: list[WebhookDelivery]) -> None:
    for delivery in deliveries:
        assert delivery.lease_expires_at is not None  # the fan-out leases every delivery it hands over
        deliver_task.apply_async(args=(delivery.pk, delivery.lease_expires_at.isoformat()), retry=False)


@shared_task(name="webhooks.pump")
def pump_task() -> int:
    """Fan out new events, then hand every endpoint's due deliveries (up to its cap) to the webhooks worker.

    One pump at a time: beat sends one every interval, and pumps piling up on a backlog would take
    every thread of the worker that dispatches mail."""
    with single_flight("webhooks.pump") as alone:
        return _pump() if alone else 0


def _pump() -> int:
    deadline = time.monotonic() + PUMP_BUDGET_SECONDS
    while services.events_fan_out() and time.monotonic() < deadline:
        pass
    claimed = 0
    for endpoint_id in services.endpoints_due():
        deliveries = services.deliveries_claim(
            endpoint_id=endpoint_id, limit=settings.MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY
        )
        _enqueue(deliveries)
        claimed += len(deliveries)
    return claimed


@shared_task(name="webhooks.deliver")
def deliver_task(delivery_id: int, lease: str) -> int:
    """Send a claimed delivery, then the endpoint's next due ones while the budget lasts; returns how many."""
    delivery = (
        WebhookDelivery.objects.select_related("endpoint")
        .filter(pk=delivery_id, lease_expires_at=datetime.fromisoformat(lease))
        .first()
    )
    sent, deadline = 0, time.monotonic() + DELIVER_BUDGET_SECONDS
    while delivery is not None:
        sent += services.delivery_attempt(delivery=delivery)
        if time.monotonic() >= deadline:
            break
        following = services.deliveries_claim(endpoint_id=delivery.endpoint_id, limit=1)
        delivery = following[0] if following else None
    return sent

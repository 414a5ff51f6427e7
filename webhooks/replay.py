"""Sending events again: the console's re-send of failed deliveries, and replay of a time window of a domain's
events to one endpoint after its outage (`manage.py replay_webhooks`, the console's Replay).

Both only put deliveries back in the queue (status pending, due now) or add the missing ones: the normal
delivery path (webhooks/services.py) sends them, under the endpoint's concurrency cap, with its retries and
deadlines, signed when sent, each with its original webhook-id so a receiver that saw it once can tell.
A delivery whose lease is live is being sent right now and is left to finish.
"""

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from mailservice.errors import ValidationFailed
from messaging.models import Message, MessageEvent
from webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEndpoint
from webhooks.payloads import PUBLIC_TYPE, event_payload, messages_data
from webhooks.services import event_types_checked, quiet_delays


def deliveries_resend(*, deliveries: QuerySet[WebhookDelivery]) -> int:
    """Send these deliveries again from the start of the schedule (the console's re-send), each with its own
    payload and webhook-id, signed when sent. One being sent right now (its lease live) is left to finish."""
    now = timezone.now()
    idle = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    return deliveries.filter(idle).update(
        status=DeliveryStatus.PENDING, attempts=0, next_attempt_at=now, lease_expires_at=None, updated_at=now
    )


REPLAY_BATCH = 500


def webhooks_replay(
    *, endpoint: WebhookEndpoint, since: datetime, until: datetime | None = None, event_types: list[str] | None = None
) -> int:
    """Send the endpoint every event of its domain created in [since, until) again (of `event_types`, and of
    those it subscribes to), each with its original webhook-id, through the normal delivery path: the
    pump claims them under the concurrency cap, retries and deadlines as always, signed when sent.

    An event the endpoint has a delivery of is re-sent as that delivery (its frozen payload and id); one it
    has none of (the endpoint was created later) gets one now, with the event's id and today's body. Delays
    that fan-out kept quiet stay quiet. Returns how many deliveries were queued."""
    if not endpoint.enabled:
        raise ValidationFailed(f"{endpoint.public_id} is disabled; enable it first (its deliveries would wait)")
    until = until or timezone.now()
    if until <= since:
        raise ValidationFailed("--until must be after --since")
    wanted = [kind for kind in event_types_checked(event_types or []) or EventType.values if endpoint.wants(kind)]
    window = Q(subject_created_at__gte=since, subject_created_at__lt=until)
    queued = 0
    if EventType.DMARC_REPORT in wanted:
        reports = endpoint.deliveries.filter(window, event_type=EventType.DMARC_REPORT)
        queued += deliveries_resend(deliveries=reports)
    recorded = [recorded for recorded, public in PUBLIC_TYPE.items() if public in wanted]
    # The domain's events by event_stream_idx, a batch at a time in (created_at, id) order, both sides: an
    # endpoint gets test keys' events too.
    events = MessageEvent.objects.filter(
        domain_id=endpoint.domain_id, is_test__in=[False, True], type__in=recorded, created_at__lt=until
    ).order_by("created_at", "id")
    position = Q(created_at__gte=since)
    while batch := list(events.filter(position)[:REPLAY_BATCH]):
        queued += _replay_events(endpoint, batch)
        last = batch[-1]
        position = Q(created_at=last.created_at, id__gt=last.pk) | Q(created_at__gt=last.created_at)
    return queued


def _replay_events(endpoint: WebhookEndpoint, events: list[MessageEvent]) -> int:
    quiet = quiet_delays(events)
    events = [event for event in events if event.pk not in quiet]
    if not events:
        return 0
    window = Q(subject_created_at__gte=events[0].created_at, subject_created_at__lte=events[-1].created_at)
    mine = endpoint.deliveries.filter(window, message_event_id__in=[event.pk for event in events])
    have = set(mine.values_list("message_event_id", flat=True))
    resent = deliveries_resend(deliveries=mine) if have else 0
    missing = [event for event in events if event.pk not in have]
    if missing:
        messages = Message.objects.select_related("domain").defer("text", "html", "raw")
        by_pk = messages.in_bulk({event.message_id for event in missing})
        data = messages_data(list(by_pk.values()))
        WebhookDelivery.objects.bulk_create(
            [
                WebhookDelivery(
                    endpoint=endpoint,
                    message_event=event,
                    subject_created_at=event.created_at,
                    event_id=event.public_id,
                    event_type=PUBLIC_TYPE[event.type],
                    payload=event_payload(
                        event=event, message=by_pk[event.message_id], message_data=data[event.message_id]
                    ),
                    next_attempt_at=timezone.now(),
                )
                for event in missing
            ],
            ignore_conflicts=True,
        )
    return resent + len(missing)

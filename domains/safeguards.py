"""Automatic sending safeguards: pause a domain whose recent sends bounce or draw complaints too often.

Mailbox providers throttle and block senders well before these rates become visible to them, so
the service stops a domain on its own and leaves resuming to an operator (`resume_sending`).
"""

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from domains.models import Domain
from domains.services import sending_pause
from messaging.models import Direction, Message, Status

SAFEGUARD_ACTOR = "safeguard"


@dataclass(frozen=True)
class SendingHealth:
    sends: int
    bounces: int
    complaints: int


def sending_health(*, domain: Domain) -> SendingHealth:
    """Bounces and complaints among the domain's most recent sends (the last N, none older than H hours)."""
    since = timezone.now() - timedelta(hours=settings.MAILSERVICE_SAFEGUARD_WINDOW_HOURS)
    window = (
        Message.objects.filter(domain=domain, direction=Direction.SENT, is_test=False, created_at__gte=since)
        .order_by("-created_at", "-public_id")
        .values("id")[: settings.MAILSERVICE_SAFEGUARD_WINDOW_SENDS]
    )
    counts = Message.objects.filter(id__in=window).aggregate(
        sends=Count("id"),
        bounces=Count("id", filter=Q(status=Status.BOUNCED)),
        complaints=Count("id", filter=Q(status=Status.COMPLAINED)),
    )
    return SendingHealth(**counts)


def _breach(health: SendingHealth) -> str | None:
    """Why the domain must stop, or None."""
    if health.sends < settings.MAILSERVICE_SAFEGUARD_MIN_SENDS:
        return None
    for label, count, limit in (
        ("bounce", health.bounces, settings.MAILSERVICE_BOUNCE_RATE_LIMIT),
        ("complaint", health.complaints, settings.MAILSERVICE_COMPLAINT_RATE_LIMIT),
    ):
        rate = count / health.sends
        if rate > limit:
            return (
                f"Automatic pause: {label} rate {rate * 100:.4g}% ({count} of the last {health.sends} sends) "
                f"is over the {limit * 100:.4g}% limit"
            )
    return None


def safeguard_check(*, domain: Domain) -> bool:
    """Pause the domain if its bounce or complaint rate is over the limit; True when this call paused it."""
    domain.refresh_from_db(fields=["sending_paused"])
    if domain.sending_paused:
        return False  # keep the first reason and time an operator will read
    reason = _breach(sending_health(domain=domain))
    if reason is None:
        return False
    sending_pause(domain=domain, actor=SAFEGUARD_ACTOR, reason=reason, automatic=True)
    return True

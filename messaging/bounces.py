"""What a bounce does to its recipient, whoever says it: one policy for a receiver's refusal during
SMTP (dispatch, messaging/outbound/outcomes.py: an MX in direct delivery, or the relay) and for a
bounce report that comes back later (messaging/inbound/services.py).

Both hand over the one classifier's verdict (messaging/refusals.py): its reason, hard or soft, and
whether it suppresses. A hard bounce suppresses its recipient for good only when its reason is the
recipient's own (an unknown user, a disabled mailbox, a domain that does not exist); the sender's
reasons (blocked, spam_detected, authentication, policy, e.g. `550 5.7.1 … blocked` or a whitelist
request) say nothing about the address, which accepts mail once the sender is fixed, and count toward
the sending domain's health instead. A soft bounce counts toward MAILSERVICE_SOFT_BOUNCE_LIMIT, which
suppresses the address for a while (`soft_bounce_streak`).
Callers record the bounce's event first and call `bounce_apply` in the same transaction.
"""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from messaging.models import EventType, Message, MessageEvent, Suppression, SuppressionReason
from messaging.refusals import Verdict
from messaging.suppressions import suppression_add


def bounce_apply(*, message: Message, address: str, verdict: Verdict, detail: str) -> None:
    """Apply the policy to `address` (a suppression key) after its bounce was recorded: a verdict that
    suppresses adds it with `detail` (the reply or the report) as the reason; a soft one may complete a streak."""
    if verdict.suppresses:
        reason = SuppressionReason.BOUNCE
        suppression_add(domain=message.domain, address=address, reason=reason, source_message=message, detail=detail)
    elif verdict.reason and not verdict.hard:
        soft_bounce_streak(message=message, address=address, detail=detail)


def soft_bounce_streak(*, message: Message, address: str, detail: str) -> None:
    """Suppress for MAILSERVICE_SOFT_BOUNCE_SUPPRESS_DAYS an address that soft-bounced on
    MAILSERVICE_SOFT_BOUNCE_LIMIT messages within the window, counted since a previous such
    suppression lapsed (so a lapsed one starts a new streak)."""
    now = timezone.now()
    since = now - timedelta(days=settings.MAILSERVICE_SOFT_BOUNCE_WINDOW_DAYS)
    listed = Suppression.objects.filter(domain=message.domain, address=address).first()
    if listed is not None and listed.expires_at is None:
        return  # already suppressed for good
    if listed is not None and listed.expires_at is not None:
        since = max(since, listed.expires_at)
    streak = (
        MessageEvent.objects.filter(
            type=EventType.SOFT_BOUNCED, recipient=address, message__domain=message.domain, created_at__gte=since
        )
        .values("message")
        .distinct()
        .count()
    )
    if streak >= settings.MAILSERVICE_SOFT_BOUNCE_LIMIT:
        suppression_add(
            domain=message.domain,
            address=address,
            reason=SuppressionReason.SOFT_BOUNCE,
            source_message=message,
            detail=f"{streak} soft bounces; last: {detail}",
            expires_at=now + timedelta(days=settings.MAILSERVICE_SOFT_BOUNCE_SUPPRESS_DAYS),
        )

"""What a bounce does to its recipient, whoever says it: one policy for a receiver's refusal during
SMTP (dispatch, messaging/outbound/outcomes.py: an MX in direct delivery, or the relay) and for a
bounce report that comes back later (messaging/inbound/services.py).

Hard or soft is the RFC 3463 class of the enhanced status, else of the reply code (`bounce_type`),
as the report classifier reads a DSN (messaging/inbound/reports/dsn.py). Why is the shared reply
classifier's cause (messaging/reply_causes.py). A hard bounce suppresses its recipient for good,
unless the cause is the sender's (authentication, reputation, rate, the receiver's policy, e.g.
`550 5.7.1 … blocked` or a whitelist request): such a refusal says nothing about the address, and
the same address accepts mail once the sender is fixed. A soft bounce counts toward
MAILSERVICE_SOFT_BOUNCE_LIMIT, which suppresses the address for a while (`soft_bounce_streak`).
Callers record the bounce's event first and call `bounce_apply` in the same transaction.
"""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from messaging.models import BounceType, EventType, Message, MessageEvent, ReplyCause, Suppression, SuppressionReason
from messaging.suppressions import suppression_add

# Causes that blame the sender, not the recipient's address: never a reason to stop mailing it.
SENDER_CAUSES = frozenset(
    {ReplyCause.AUTHENTICATION, ReplyCause.REPUTATION, ReplyCause.RATE_LIMITED, ReplyCause.POLICY}
)


def bounce_type(code: int | None, enhanced_status: str) -> BounceType:
    """Soft when the enhanced status (else the reply code) is of class 4; hard otherwise, a final
    failure with neither included."""
    evidence = enhanced_status or (str(code) if code is not None else "")
    return BounceType.SOFT if evidence.startswith("4") else BounceType.HARD


def suppresses(kind: BounceType, cause: str) -> bool:
    """Whether a hard bounce of this cause suppresses its recipient for good."""
    return kind == BounceType.HARD and cause not in SENDER_CAUSES


def bounce_apply(*, message: Message, address: str, kind: BounceType, cause: str, detail: str) -> None:
    """Apply the policy to `address` (a suppression key) after its bounce was recorded: a hard
    bounce not caused by the sender suppresses it with `detail` (the reply or the report) as the
    reason; a soft one may complete a streak."""
    if suppresses(kind, cause):
        reason = SuppressionReason.BOUNCE
        suppression_add(domain=message.domain, address=address, reason=reason, source_message=message, detail=detail)
    elif kind == BounceType.SOFT:
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

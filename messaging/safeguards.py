"""Automatic sending safeguards: pause a domain whose recent sends bounce or draw complaints too often.

Mailbox providers throttle and block senders well before these rates become visible to them, so
the service stops a domain on its own and leaves resuming to an operator (`resume_sending`).
A rate alone is not evidence: a pause also needs a minimum volume of sends and a minimum number
of distinct recipients who bounced (complained), so one report, forged or not, cannot stop a
domain, nor can one person reporting many messages: each recipient counts once in the window.
"""

from django.conf import settings

from domains.models import Domain
from domains.sending import domain_pause
from domains.services import sending_pause
from messaging.selectors import DeliveryRates, delivery_rates_of_recent_sends

SAFEGUARD_ACTOR = "safeguard"


def sending_health(*, domain: Domain) -> DeliveryRates:
    """Distinct recipients who bounced or complained among the domain's most recent sends (the last N,
    none older than H hours)."""
    return delivery_rates_of_recent_sends(
        domain=domain,
        hours=settings.MAILSERVICE_SAFEGUARD_WINDOW_HOURS,
        sends=settings.MAILSERVICE_SAFEGUARD_WINDOW_SENDS,
    )


def _breach(health: DeliveryRates) -> str | None:
    """Why the domain must stop, or None."""
    if health.sent < settings.MAILSERVICE_SAFEGUARD_MIN_SENDS:
        return None
    for label, count, limit, minimum in (
        ("bounce", health.bounced, settings.MAILSERVICE_BOUNCE_RATE_LIMIT, settings.MAILSERVICE_SAFEGUARD_MIN_BOUNCES),
        (
            "complaint",
            health.complained,
            settings.MAILSERVICE_COMPLAINT_RATE_LIMIT,
            settings.MAILSERVICE_SAFEGUARD_MIN_COMPLAINTS,
        ),
    ):
        rate = count / health.sent
        if count >= minimum and rate > limit:
            return (
                f"Automatic pause: {label} rate {rate * 100:.4g}% ({count} recipients in the last {health.sent} "
                f"sends) is over the {limit * 100:.4g}% limit"
            )
    return None


def safeguard_check(*, domain: Domain) -> bool:
    """Pause the domain if its bounce or complaint rate is over the limit; True when this call paused it."""
    domain.refresh_from_db(fields=["sending_paused", "auto_paused", "paused_at", "paused_by", "pause_reason"])
    if domain_pause(domain) is not None:
        return False  # keep the first reason and time an operator will read
    reason = _breach(sending_health(domain=domain))
    if reason is None:
        return False
    sending_pause(domain=domain, actor=SAFEGUARD_ACTOR, reason=reason, automatic=True)
    return True

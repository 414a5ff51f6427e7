"""The readiness check put together: the DNS checks of messaging/readiness/dns_checks.py, for the way
mail leaves (EMAIL_URL), plus the domain's complaint rate from the daily message counts and the refusals
receivers blamed on the sender (`sender_refusals_check`); stored as the domain's last check. Run by
`manage.py check_readiness`, the console's "Check readiness" and the daily beat task.

Complaint rate: Gmail's Postmaster Tools rate is a daily one (complaints reported that day over mail
sent that day), with a ceiling of 0.3 % and a target below 0.1 %; lifting Gmail's mitigation takes 7
days in a row under the ceiling. So each of the last 7 UTC days is rated on its own, and the worst
day decides: `fail` at 0.3 % or more, `warn` above 0.1 %.
"""

import logging
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from domains.models import Domain
from mailservice.errors import ApiError
from messaging.aggregates import status_counts_rollup
from messaging.models import CountedEvent, DailyStatusCount
from messaging.outbound.smtp_client import helo_name
from messaging.outbound.transports import is_direct_delivery
from messaging.readiness.dns_checks import (
    Check,
    Readiness,
    Sending,
    SourceAddress,
    Status,
    readiness_dns_checks,
    readiness_save,
)
from messaging.selectors import domain_refusal_health

logger = logging.getLogger(__name__)

COMPLAINT_DAYS = 7
COMPLAINT_CEILING = 0.003  # Gmail and Yahoo: never reach 0.3 %
COMPLAINT_TARGET = 0.001  # Gmail: keep below 0.1 %
REFUSAL_DAYS = 7  # the same week as the complaint rate


def source_addresses() -> tuple[SourceAddress, ...]:
    """MAILSERVICE_SOURCE_ADDRESSES (parsed at start-up, config/env.py); an address without its own HELO
    name gives the EHLO name the service uses (MAILSERVICE_HELO_NAME, else this machine's FQDN)."""
    return tuple(
        SourceAddress(address, helo or helo_name()) for address, helo in settings.MAILSERVICE_SOURCE_ADDRESSES.items()
    )


def current_sending() -> Sending:
    """How mail leaves now: direct delivery (EMAIL_URL=mx://) from its source addresses, or a relay."""
    if not is_direct_delivery(settings.EMAIL_URL or ""):
        return Sending(direct=False)
    return Sending(direct=True, sources=source_addresses())


def _daily_counts(*, domain: Domain, since: date) -> dict[date, dict[str, int]]:
    """{day: {"sent", "complained"}} from the rolled-up daily counts (messaging/aggregates.py)."""
    kinds = {CountedEvent.SENT.value: "sent", CountedEvent.COMPLAINED.value: "complained"}
    rows = (
        DailyStatusCount.objects.filter(domain=domain, day__gte=since, kind__in=list(kinds))
        .values_list("day", "kind")
        .annotate(total=Sum("count"))
        .order_by()
    )
    days: dict[date, dict[str, int]] = {}
    for day, kind, total in rows:
        days.setdefault(day, {"sent": 0, "complained": 0})[kinds[kind]] += total
    return days


def complaint_rate_check(*, domain: Domain, today: date) -> Check:
    days = {
        day: counts
        for day, counts in _daily_counts(domain=domain, since=today - timedelta(days=COMPLAINT_DAYS - 1)).items()
        if counts["sent"]
    }
    if not days:
        return Check("complaint_rate", Status.SKIP, f"nothing sent in the last {COMPLAINT_DAYS} days")
    worst_day, worst = max(days.items(), key=lambda item: (item[1]["complained"] / item[1]["sent"], item[0]))
    rate = worst["complained"] / worst["sent"]
    sent, complained = sum(c["sent"] for c in days.values()), sum(c["complained"] for c in days.values())
    detail = (
        f"worst day of the last {COMPLAINT_DAYS} ({worst_day}): {rate:.2%}"
        f" ({worst['complained']} complaints / {worst['sent']} sent); all {COMPLAINT_DAYS} days:"
        f" {complained / sent:.2%} ({complained} / {sent})"
    )
    if rate >= COMPLAINT_CEILING:
        return Check("complaint_rate", Status.FAIL, f"{detail}; the providers' ceiling is {COMPLAINT_CEILING:.1%}")
    if rate > COMPLAINT_TARGET:
        return Check("complaint_rate", Status.WARN, f"{detail}; keep it below {COMPLAINT_TARGET:.1%}")
    return Check("complaint_rate", Status.PASS, detail)


def sender_refusals_check(*, domain: Domain) -> Check:
    """`warn` when receivers refused or deferred any of the domain's messages of the last REFUSAL_DAYS days for
    a reason that is the sender's to fix (blocked, spam_detected, authentication, policy: messaging/refusals.py),
    with the count per reason. No threshold makes it fail: no provider publishes one for these, and a single
    block already needs looking at."""
    health = domain_refusal_health(domain=domain, days=REFUSAL_DAYS)
    if not health.sent:
        return Check("sender_refusals", Status.SKIP, f"nothing sent in the last {REFUSAL_DAYS} days")
    if not health.refused:
        return Check("sender_refusals", Status.PASS, f"none of {health.sent} messages of the last {REFUSAL_DAYS} days")
    counts = ", ".join(f"{reason} {count}" for reason, count in health.by_reason.items())
    detail = f"{health.refused} of {health.sent} messages of the last {REFUSAL_DAYS} days refused for the sender"
    return Check("sender_refusals", Status.WARN, f"{detail}: {counts}")


def domain_readiness(*, domain: Domain, now: datetime | None = None) -> Readiness:
    """Run every check and keep the result as the domain's last; raises ValidationFailed on a
    malformed MAILSERVICE_DNS_RESOLVER or MAILSERVICE_SOURCE_ADDRESSES."""
    now = now or timezone.now()
    checks = readiness_dns_checks(domain=domain, sending=current_sending())
    # The daily counts as of now, not as of the last dashboard view: without beat (the embedded mode) nothing
    # else rolls them up. Events of the last ROLLUP_LAG wait for the next pass (messaging/aggregates.py).
    status_counts_rollup(now=now)
    checks.append(complaint_rate_check(domain=domain, today=now.date()))
    checks.append(sender_refusals_check(domain=domain))
    readiness = Readiness(domain=domain.name, checks=checks)
    readiness_save(domain=domain, readiness=readiness, checked_at=now)
    return readiness


def readiness_check_all() -> int:
    """The daily check of every domain; returns how many were checked. A configuration error stops it
    at the first domain (every one would fail alike) and is logged."""
    checked = 0
    for domain in Domain.objects.order_by("pk"):
        try:
            domain_readiness(domain=domain)
        except ApiError as exc:
            logger.error("readiness check stopped at %s: %s", domain.name, exc.message)
            break
        checked += 1
    return checked

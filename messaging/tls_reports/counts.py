"""TLS-RPT (RFC 8460): direct delivery counts each SMTP session's TLS outcome, and the day's counts
become one JSON report per policy domain (RFC 8460 §4.4); messaging/tls_reports/sending.py sends them.

Counting is one UPSERT per session that adds 1 to its report line (`TlsSessionCount`), committed on its
own: a killed worker loses at most the session it was in, and no count is ever added twice. A database
error is logged and the delivery goes on: a report is worth less than the mail.
"""

import hashlib
import json
import logging
import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import DatabaseError, IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from messaging import sql
from messaging.models import TlsPolicyType, TlsSessionCount

logger = logging.getLogger(__name__)

# RFC 8460 §4.3: negotiation failures (4.3.1), DANE's and MTA-STS's policy failures (4.3.2).
RESULT_TYPES = frozenset(
    {
        "starttls-not-supported",
        "certificate-host-mismatch",
        "certificate-expired",
        "certificate-not-trusted",
        "validation-failure",
        "tlsa-invalid",
        "dnssec-invalid",
        "dane-required",
        "sts-policy-fetch-error",
        "sts-policy-invalid",
        "sts-webpki-invalid",
    }
)
_MAX_NAME = 253  # a DNS name; longer values are cut rather than refused


def _policy_hash(policy_strings: list[str]) -> str:
    return hashlib.sha256(json.dumps(policy_strings).encode()).hexdigest()


def record_tls_outcome(
    *,
    policy_domain: str,
    policy_type: str,
    policy_strings: list[str],
    mx_host: str,
    receiving_ip: str,
    result_type: str = "",
) -> None:
    """Count one session (result_type "" = success) in today's (UTC) TLS report for policy_domain."""
    if policy_type not in TlsPolicyType.values or (result_type and result_type not in RESULT_TYPES):
        logger.warning("tls-rpt: session not counted: unknown policy type %r or result %r", policy_type, result_type)
        return
    row = TlsSessionCount(
        day=timezone.now().astimezone(UTC).date(),
        policy_domain=policy_domain.rstrip(".").lower()[:_MAX_NAME],
        policy_type=policy_type,
        policy_strings=list(policy_strings),
        policy_hash=_policy_hash(list(policy_strings)),
        mx_host=mx_host.rstrip(".").lower()[:_MAX_NAME],
        receiving_ip=receiving_ip[:45],
        result_type=result_type,
    )
    if getattr(_lane, "deferred", None) is not None:
        _lane.deferred.append(row)
        return
    _write(row)


def _write(row: TlsSessionCount) -> None:
    try:
        # A savepoint when dispatch has a transaction open, so a failure here cannot spoil it.
        with transaction.atomic():
            _count(row)
    except DatabaseError as exc:
        logger.warning("tls-rpt: session of %s not counted: %s", row.policy_domain, exc)


# Direct delivery's lanes (threads, messaging/outbound/lanes.py) hold no database connection: their
# counts wait in a list, written by the batch's thread (`record_deferred`).
_lane = threading.local()


@contextmanager
def deferred_counts() -> Iterator[list[TlsSessionCount]]:
    """Within the block, this thread's counts are kept in the list it yields instead of written."""
    kept: list[TlsSessionCount] = []
    _lane.deferred = kept
    try:
        yield kept
    finally:
        _lane.deferred = None


def record_deferred(rows: list[TlsSessionCount]) -> None:
    """Write counts a lane kept (`deferred_counts`), from a thread that may use the database."""
    for row in rows:
        _write(row)


_KEY = ("day", "policy_domain", "policy_type", "policy_hash", "mx_host", "receiving_ip", "result_type")


def _count(row: TlsSessionCount) -> None:
    """Add one session to the row's line: one statement on PostgreSQL, an ORM twin elsewhere."""
    if sql.available():
        _count_in_one_statement(row)
        return
    key = {name: getattr(row, name) for name in _KEY}
    if TlsSessionCount.objects.filter(**key).update(sessions=F("sessions") + 1, updated_at=timezone.now()) == 0:
        try:
            with transaction.atomic():
                row.sessions = 1
                row.save(force_insert=True)
        except IntegrityError:  # another process inserted the line first
            TlsSessionCount.objects.filter(**key).update(sessions=F("sessions") + 1, updated_at=timezone.now())


def _count_in_one_statement(row: TlsSessionCount) -> None:
    table = TlsSessionCount._meta.db_table
    columns = [*_KEY, "policy_strings", "sessions", "created_at", "updated_at"]
    now = timezone.now()
    values = [getattr(row, name) for name in _KEY] + [json.dumps(row.policy_strings), 1, now, now]
    placeholders = ", ".join(["%s"] * len(columns))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({placeholders}) "  # noqa: S608 - names from the model
            f"ON CONFLICT ON CONSTRAINT tls_session_count_key "
            f"DO UPDATE SET sessions = {table}.sessions + 1, updated_at = EXCLUDED.updated_at",
            values,
        )


# --- the report ----------------------------------------------------------------------------------


def policy_domains_counted(*, day: date) -> list[str]:
    """The policy domains with sessions counted on `day`, in name order."""
    counted = TlsSessionCount.objects.filter(day=day).values_list("policy_domain", flat=True)
    return sorted(set(counted))


def report_window(day: date) -> tuple[datetime, datetime]:
    """The day's first and last second, UTC (RFC 8460 §4.4 date-range, as its example gives it)."""
    start = datetime.combine(day, time.min, tzinfo=UTC)
    return start, start + timedelta(days=1, seconds=-1)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _mx_patterns(policy_type: str, policy_strings: list[str], mx_host: str) -> list[str]:
    """RFC 8460 §4.4 mx-host: an MTA-STS policy's `mx:` patterns, a TLSA policy's MX host."""
    if policy_type == TlsPolicyType.STS:
        pairs = (line.partition(":") for line in policy_strings)
        return [value.strip() for name, _, value in pairs if name.strip() == "mx"]
    return [mx_host] if policy_type == TlsPolicyType.TLSA else []


def _policy_entry(rows: list[TlsSessionCount], policy_domain: str) -> dict[str, Any]:
    first = rows[0]
    policy: dict[str, Any] = {"policy-type": first.policy_type, "policy-domain": policy_domain}
    if first.policy_type != TlsPolicyType.NO_POLICY:
        policy["policy-string"] = first.policy_strings
    if patterns := _mx_patterns(first.policy_type, first.policy_strings, first.mx_host):
        policy["mx-host"] = patterns
    failures = [row for row in rows if row.result_type]
    entry: dict[str, Any] = {
        "policy": policy,
        "summary": {
            "total-successful-session-count": sum(row.sessions for row in rows if not row.result_type),
            "total-failure-session-count": sum(row.sessions for row in failures),
        },
    }
    if failures:
        entry["failure-details"] = [_failure_detail(row) for row in failures]
    return entry


def _failure_detail(row: TlsSessionCount) -> dict[str, Any]:
    detail: dict[str, Any] = {"result-type": row.result_type, "failed-session-count": row.sessions}
    if row.mx_host:
        detail["receiving-mx-hostname"] = row.mx_host
    if row.receiving_ip:
        detail["receiving-ip"] = row.receiving_ip
    return detail


def tls_report(*, day: date, policy_domain: str, organization: str, contact: str, report_id: str) -> dict[str, Any]:
    """The RFC 8460 §4.4 report of `policy_domain`'s sessions on `day`: one policy entry per policy
    applied (a TLSA policy per MX host, as its records are), each with its summary and failures."""
    groups: dict[tuple[str, str, str], list[TlsSessionCount]] = defaultdict(list)
    rows = TlsSessionCount.objects.filter(day=day, policy_domain=policy_domain).order_by(*_KEY)
    for row in rows:
        per_host = row.mx_host if row.policy_type == TlsPolicyType.TLSA else ""
        groups[(row.policy_type, row.policy_hash, per_host)].append(row)
    start, end = report_window(day)
    return {
        "organization-name": organization,
        "date-range": {"start-datetime": _rfc3339(start), "end-datetime": _rfc3339(end)},
        "contact-info": contact,
        "report-id": report_id,
        "policies": [_policy_entry(group, policy_domain) for group in groups.values()],
    }

"""An SMTP TLS report (RFC 8460 section 4) read into value objects.

Totals are taken as each policy's `summary` states them; failures are summed per `result-type`
over its `failure-details`. A report may cover several policy domains: each is counted apart.
"""

import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from mailservice.mailbox import InvalidAddress, canonical_domain
from messaging.inbound.aggregate import ReportRefused

MAX_SESSIONS = 2**62  # what the database's bigint holds, with room to sum a report's policies
_TEXT_LIMIT = 255
_RESULT_TYPE_LIMIT = 64


@dataclass
class TlsDomainCounts:
    """One policy domain's sessions in a report."""

    successful: int = 0
    failed: int = 0
    failures: Counter[str] = field(default_factory=Counter)  # result-type: failed sessions


@dataclass(frozen=True)
class TlsAggregate:
    org_name: str
    contact_domain: str  # contact-info's domain when it is an email address, canonical; else ''
    report_id: str
    begin: datetime
    end: datetime
    domains: dict[str, TlsDomainCounts]  # by canonical policy domain


def _object(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ReportRefused(f"TLS report's {where} is not an object")
    return value


def _string(report: dict[str, Any], name: str) -> str:
    value = report.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ReportRefused(f"TLS report has no {name}")
    return value.replace("\x00", "").strip()[:_TEXT_LIMIT]


def _contact_domain(contact: Any) -> str:
    """The domain of `contact-info` when it is an email address (RFC 8460 4.4 allows a URI too)."""
    if not isinstance(contact, str) or "@" not in contact:
        return ""
    try:
        return canonical_domain(contact.rpartition("@")[2].strip(" <>")[:253], trailing_dot=True)
    except InvalidAddress:
        return ""


def _sessions(value: Any, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SESSIONS:
        raise ReportRefused(f"TLS report's {where} is not a count of sessions: {str(value)[:40]!r}")
    return value


def _datetime(date_range: dict[str, Any], name: str) -> datetime:
    text = date_range.get(name)
    try:
        if not isinstance(text, str):
            raise ValueError
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ReportRefused(f"TLS report's date-range/{name} is not a date-time: {str(text)[:40]!r}") from None
    if moment.tzinfo is None:
        raise ReportRefused(f"TLS report's date-range/{name} has no time zone: {text[:40]!r}")
    return moment


def _policy_domain(policy: dict[str, Any]) -> str:
    named = _object(policy.get("policy"), "policy").get("policy-domain")
    try:
        if not isinstance(named, str):
            raise InvalidAddress("missing")
        return canonical_domain(named, trailing_dot=True)
    except InvalidAddress:
        raise ReportRefused(f"TLS report's policy-domain {str(named)[:80]!r} is not a domain") from None


def _count_policy(counts: TlsDomainCounts, policy: dict[str, Any]) -> None:
    summary = _object(policy.get("summary"), "summary")
    counts.successful += _sessions(summary.get("total-successful-session-count"), "total-successful-session-count")
    counts.failed += _sessions(summary.get("total-failure-session-count"), "total-failure-session-count")
    details = policy.get("failure-details", [])
    if not isinstance(details, list):
        raise ReportRefused("TLS report's failure-details is not a list")
    for detail in details:
        detail = _object(detail, "failure-details entry")
        result_type = detail.get("result-type")
        if not isinstance(result_type, str) or not result_type.strip():
            raise ReportRefused("TLS report's failure-details entry has no result-type")
        sessions = _sessions(detail.get("failed-session-count"), "failed-session-count")
        counts.failures[result_type.replace("\x00", "").strip().lower()[:_RESULT_TYPE_LIMIT]] += sessions


def tlsrpt_parse(document: bytes) -> TlsAggregate:
    """The report in `document` (JSON); ReportRefused with the reason when it is not one we can count."""
    try:
        report = _object(json.loads(document), "top level")
    except (ValueError, RecursionError) as exc:
        raise ReportRefused(f"TLS report is not JSON: {str(exc)[:120]}") from None
    date_range = _object(report.get("date-range"), "date-range")
    begin, end = _datetime(date_range, "start-datetime"), _datetime(date_range, "end-datetime")
    if end < begin:
        raise ReportRefused("TLS report's date range ends before it begins")
    policies = report.get("policies")
    if not isinstance(policies, list) or not policies:
        raise ReportRefused("TLS report has no policies")
    domains: dict[str, TlsDomainCounts] = {}
    for policy in policies:
        policy = _object(policy, "policies entry")
        _count_policy(domains.setdefault(_policy_domain(policy), TlsDomainCounts()), policy)
    for counts in domains.values():
        if counts.successful + counts.failed > MAX_SESSIONS or sum(counts.failures.values()) > MAX_SESSIONS:
            raise ReportRefused("TLS report's session counts are out of range")
    return TlsAggregate(
        org_name=_string(report, "organization-name"),
        contact_domain=_contact_domain(report.get("contact-info")),
        report_id=_string(report, "report-id"),
        begin=begin,
        end=end,
        domains=domains,
    )

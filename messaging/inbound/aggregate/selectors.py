"""What the DMARC aggregate and TLS reports a domain received say: summaries and per-day series for the
console and `dmarc_summary`/`tls_summary`, and the gauges of GET /metrics. Only authenticated reports count
unless asked (messaging/inbound/aggregate/authentication.py)."""

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, Max, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, TruncDate
from django.utils import timezone

from domains.models import Domain
from messaging.models import DmarcRecord, DmarcReport, TlsReport, TlsReportFailure

SUMMARY_DAYS = 30  # dmarc_summary's and tls_summary's default window


@dataclass(frozen=True)
class DmarcSource:
    source_ip: str
    messages: int
    dmarc_pass: int
    reverse_name: str

    @property
    def dmarc_fail(self) -> int:
        return self.messages - self.dmarc_pass


@dataclass(frozen=True)
class DmarcSummary:
    """A domain's DMARC aggregate reports whose period ended within the window; counts are messages."""

    domain: str
    reports: int  # counted in the figures below
    unauthenticated_reports: int  # in the window, whether counted or not
    messages: int
    dmarc_pass: int
    dkim_aligned_pass: int
    spf_aligned_pass: int
    sources: list[DmarcSource]

    def as_dict(self) -> dict[str, object]:
        return {
            "domain": self.domain,
            "reports": self.reports,
            "unauthenticated_reports": self.unauthenticated_reports,
            "messages": self.messages,
            "dmarc_pass": self.dmarc_pass,
            "dkim_aligned_pass": self.dkim_aligned_pass,
            "spf_aligned_pass": self.spf_aligned_pass,
            "sources": [
                {"source_ip": source.source_ip, "messages": source.messages, "dmarc_pass": source.dmarc_pass}
                for source in self.sources
            ],
        }


_DMARC_PASS = Q(dkim_aligned=True) | Q(spf_aligned=True)


def _window_start(days: int) -> datetime:
    return timezone.now() - timedelta(days=days)


def _dmarc_reports(domain: Domain, days: int, include_unauthenticated: bool) -> QuerySet[DmarcReport]:
    reports = DmarcReport.objects.filter(domain=domain, end__gte=_window_start(days))
    return reports if include_unauthenticated else reports.filter(authenticated=True)


def dmarc_summary(
    *, domain: Domain, days: int = SUMMARY_DAYS, include_unauthenticated: bool = False, with_sources: bool = True
) -> DmarcSummary:
    """Reports whose date range ends within the last `days` days (dmarc_report_domain_end_idx), the
    authenticated ones only unless `include_unauthenticated`; sources by messages, most first (none
    unless `with_sources`: the console pages through dmarc_failing_sources instead)."""
    reports = _dmarc_reports(domain, days, include_unauthenticated)
    records = DmarcRecord.objects.filter(report__in=reports)
    totals = records.aggregate(
        messages=Coalesce(Sum("count"), 0),
        dmarc_pass=Coalesce(Sum("count", filter=_DMARC_PASS), 0),
        dkim_aligned_pass=Coalesce(Sum("count", filter=Q(dkim_aligned=True)), 0),
        spf_aligned_pass=Coalesce(Sum("count", filter=Q(spf_aligned=True)), 0),
    )
    by_source = (
        records.values("source_ip")
        .annotate(
            messages=Sum("count"),
            dmarc_pass=Coalesce(Sum("count", filter=_DMARC_PASS), 0),
            reverse_name=Max("reverse_name"),
        )
        .order_by("-messages", "source_ip")
    )
    unauthenticated = DmarcReport.objects.filter(domain=domain, end__gte=_window_start(days), authenticated=False)
    return DmarcSummary(
        domain=domain.name,
        reports=reports.count(),
        unauthenticated_reports=unauthenticated.count(),
        sources=[DmarcSource(**row) for row in by_source] if with_sources else [],
        **totals,
    )


def dmarc_failing_sources(
    *, domain: Domain, days: int = SUMMARY_DAYS, include_unauthenticated: bool = False
) -> QuerySet[Any, Any]:
    """The sources that fail DMARC, most failed messages first, for the console to page through."""
    reports = _dmarc_reports(domain, days, include_unauthenticated)
    return (
        DmarcRecord.objects.filter(report__in=reports)
        .values("source_ip")
        .annotate(
            messages=Sum("count"),
            dmarc_fail=Sum("count") - Coalesce(Sum("count", filter=_DMARC_PASS), 0),
            reverse_name=Max("reverse_name"),
        )
        .filter(dmarc_fail__gt=0)
        .order_by("-dmarc_fail", "source_ip")
    )


def dmarc_daily(
    *, domain: Domain, days: int = SUMMARY_DAYS, include_unauthenticated: bool = False
) -> list[tuple[date, int, int]]:
    """(day the report's period ended, messages, DMARC passes) for each day with reports, oldest first."""
    rows = (
        DmarcRecord.objects.filter(report__in=_dmarc_reports(domain, days, include_unauthenticated))
        .annotate(day=TruncDate("report__end"))
        .values("day")
        .annotate(messages=Sum("count"), dmarc_pass=Coalesce(Sum("count", filter=_DMARC_PASS), 0))
        .order_by("day")
    )
    return [(row["day"], row["messages"], row["dmarc_pass"]) for row in rows]


@dataclass(frozen=True)
class TlsSummary:
    """A domain's SMTP TLS reports whose period ended within the window; sessions as their summaries state."""

    domain: str
    reports: int  # counted in the figures below
    unauthenticated_reports: int  # in the window, whether counted or not
    successful_sessions: int
    failed_sessions: int
    failures: list[tuple[str, int]]  # (result type, sessions), most first

    def as_dict(self) -> dict[str, object]:
        return {
            "domain": self.domain,
            "reports": self.reports,
            "unauthenticated_reports": self.unauthenticated_reports,
            "successful_sessions": self.successful_sessions,
            "failed_sessions": self.failed_sessions,
            "failures": [{"result_type": kind, "sessions": sessions} for kind, sessions in self.failures],
        }


def tls_summary(*, domain: Domain, days: int = SUMMARY_DAYS, include_unauthenticated: bool = False) -> TlsSummary:
    """Reports whose date range ends within the last `days` days (tls_report_domain_end_idx), the
    authenticated ones only unless `include_unauthenticated`."""
    in_window = TlsReport.objects.filter(domain=domain, end__gte=_window_start(days))
    reports = in_window if include_unauthenticated else in_window.filter(authenticated=True)
    totals = reports.aggregate(
        reports=Count("id"),
        successful_sessions=Coalesce(Sum("successful_sessions"), 0),
        failed_sessions=Coalesce(Sum("failed_sessions"), 0),
    )
    failures = (
        TlsReportFailure.objects.filter(report__in=reports)
        .values("result_type")
        .annotate(sessions=Sum("sessions"))
        .order_by("-sessions", "result_type")
    )
    return TlsSummary(
        domain=domain.name,
        unauthenticated_reports=in_window.filter(authenticated=False).count(),
        failures=[(row["result_type"], row["sessions"]) for row in failures],
        **totals,
    )


@dataclass(frozen=True)
class ReportGauges:
    """Per domain name, over reports whose period ended in the last day: the DMARC pass rate of the
    authenticated reports (domains with reported messages only) and the TLS reports' failed sessions
    (domains with TLS reports only)."""

    dmarc_pass_rate: dict[str, float]
    tls_failed_sessions: dict[str, int]


def report_gauges() -> ReportGauges:
    """Two grouped queries, each on a domain-and-end index (dmarc_report_domain_end_idx, tls_report_domain_end_idx)."""
    since = _window_start(1)
    dmarc = (
        DmarcRecord.objects.filter(report__end__gte=since, report__authenticated=True)
        .values("report__domain__name")
        .annotate(messages=Sum("count"), dmarc_pass=Coalesce(Sum("count", filter=_DMARC_PASS), 0))
    )
    tls = (
        TlsReport.objects.filter(end__gte=since, authenticated=True)
        .values("domain__name")
        .annotate(failed=Sum("failed_sessions"))
    )
    return ReportGauges(
        dmarc_pass_rate={
            row["report__domain__name"]: row["dmarc_pass"] / row["messages"] for row in dmarc if row["messages"]
        },
        tls_failed_sessions={row["domain__name"]: row["failed"] for row in tls},
    )

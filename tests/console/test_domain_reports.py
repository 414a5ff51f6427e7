"""The domain page's DMARC and TLS reports: the `rua` to publish, the charts and the failing sources, escaped."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from messaging.models import AggregateKind, DmarcRecord, DmarcReport, ReportMail, ReportMailOutcome, TlsReport
from tests.factories import DomainFactory

pytestmark = pytest.mark.django_db
HOSTILE_NAME = "<script>alert(1)</script>.example"


def _mail(kind: str) -> ReportMail:
    return ReportMail.objects.create(kind=kind, outcome=ReportMailOutcome.STORED, raw=b"")


def _dmarc_report(
    domain,
    *,
    ended_days_ago: int,
    records: list[tuple[str, int, bool, str]],
    authenticated: bool = True,
    report_id: str = "",
) -> None:
    end = timezone.now() - timedelta(days=ended_days_ago)
    report = DmarcReport.objects.create(
        domain=domain,
        org_name="google.com",
        report_id=report_id or f"r{ended_days_ago}",
        begin=end - timedelta(days=1),
        end=end,
        authenticated=authenticated,
        rows=len(records),
        mail=_mail(AggregateKind.DMARC),
    )
    DmarcRecord.objects.bulk_create(
        DmarcRecord(
            report=report,
            source_ip=source_ip,
            count=count,
            dkim_aligned=passed,
            spf_aligned=False,
            reverse_name=reverse_name,
        )
        for source_ip, count, passed, reverse_name in records
    )


def test_the_domain_page_shows_what_to_publish_the_charts_and_the_failing_sources(operator, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.acme.example.com"
    domain = DomainFactory(name="acme.example.com")
    _dmarc_report(
        domain, ended_days_ago=1, records=[("203.0.113.25", 90, True, ""), ("8.8.4.4", 10, False, HOSTILE_NAME)]
    )
    _dmarc_report(domain, ended_days_ago=40, records=[("192.0.2.9", 500, False, "old.example")])  # outside 30 days
    TlsReport.objects.create(
        domain=domain,
        org_name="Google Inc.",
        report_id="t1",
        begin=timezone.now() - timedelta(days=2),
        end=timezone.now() - timedelta(days=1),
        successful_sessions=40,
        failed_sessions=2,
        authenticated=True,
        mail=_mail(AggregateKind.TLS),
    )
    html = operator.get(reverse("admin:domains_domain_change", args=[domain.pk])).content.decode()
    assert "rua=mailto:dmarc-reports@bounces.acme.example.com" in html
    assert "rua=mailto:tls-reports@bounces.acme.example.com" in html
    assert "1 authenticated DMARC reports: 100 messages,\n    90 passed DMARC" in html
    assert "1 authenticated TLS reports (0 unauthenticated): 40 successful sessions, 2 failed" in html
    assert 'aria-label="DMARC pass rate per day (%)"' in html and "pass rate %: 90" in html
    assert 'data-source="8.8.4.4"' in html and 'data-source="203.0.113.25"' not in html
    assert "192.0.2.9" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.example" in html and "<script>alert(1)" not in html


def _page(operator, domain, query: str = "") -> str:
    return operator.get(reverse("admin:domains_domain_change", args=[domain.pk]) + query).content.decode()


def test_unauthenticated_reports_are_shown_apart_and_counted_only_when_asked(operator, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.acme.example.com"
    domain = DomainFactory(name="acme.example.com")
    _dmarc_report(domain, ended_days_ago=1, records=[("203.0.113.25", 90, True, "")])
    _dmarc_report(
        domain, ended_days_ago=1, report_id="forged", records=[("8.8.4.4", 5000, False, "")], authenticated=False
    )
    html = _page(operator, domain)
    assert "1 authenticated DMARC reports: 90 messages" in html
    assert "1 unauthenticated reports" in html and 'href="?reports=all">count them too' in html
    assert 'data-source="8.8.4.4"' not in html
    everything = _page(operator, domain, "?reports=all")
    assert "2 DMARC reports, authenticated or not: 5090 messages" in everything
    assert 'data-source="8.8.4.4"' in everything


def test_the_failing_sources_are_paged(operator, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.acme.example.com"
    domain = DomainFactory(name="acme.example.com")
    failing = [(f"198.51.100.{n}", 1000 - n, False, "") for n in range(1, 121)]  # 120 sources, most failed first
    _dmarc_report(domain, ended_days_ago=1, records=failing)
    first = _page(operator, domain)
    assert first.count("data-source=") == 50
    assert 'data-source="198.51.100.1"' in first and 'data-source="198.51.100.51"' not in first
    assert "page 1 of 3 (120 sources)" in first
    last = _page(operator, domain, "?failing_page=3")
    assert last.count("data-source=") == 20 and 'data-source="198.51.100.120"' in last

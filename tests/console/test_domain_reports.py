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


def _dmarc_report(domain, *, ended_days_ago: int, records: list[tuple[str, int, bool, str]]) -> None:
    end = timezone.now() - timedelta(days=ended_days_ago)
    report = DmarcReport.objects.create(
        domain=domain,
        org_name="google.com",
        report_id=f"r{ended_days_ago}",
        begin=end - timedelta(days=1),
        end=end,
        mail=_mail(AggregateKind.DMARC),
    )
    for source_ip, count, passed, reverse_name in records:
        DmarcRecord.objects.create(
            report=report,
            source_ip=source_ip,
            count=count,
            dkim_aligned=passed,
            spf_aligned=False,
            reverse_name=reverse_name,
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
        mail=_mail(AggregateKind.TLS),
    )
    html = operator.get(reverse("admin:domains_domain_change", args=[domain.pk])).content.decode()
    assert "rua=mailto:dmarc-reports@bounces.acme.example.com" in html
    assert "rua=mailto:tls-reports@bounces.acme.example.com" in html
    assert "1 DMARC reports: 100 messages,\n    90 passed DMARC" in html
    assert "40 successful sessions, 2 failed" in html
    assert 'aria-label="DMARC pass rate per day (%)"' in html and "pass rate %: 90" in html
    assert 'data-source="8.8.4.4"' in html and 'data-source="203.0.113.25"' not in html
    assert "192.0.2.9" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;.example" in html and "<script>alert(1)" not in html

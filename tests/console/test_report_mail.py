"""Mail received at the report addresses: listed in the console with what became of it, escaped, read-only;
purged with direct delivery's TLS-RPT records once past MAILSERVICE_RETENTION_DAYS."""

from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import (
    AggregateKind,
    DmarcRecord,
    DmarcReport,
    ReportMail,
    ReportMailOutcome,
    TlsPolicyType,
    TlsReport,
    TlsReportFailure,
    TlsReportStatus,
    TlsReportSubmission,
    TlsSessionCount,
)
from messaging.retention import report_data_purge
from tests.factories import DomainFactory

pytestmark = pytest.mark.django_db

LIST = "/admin/messaging/reportmail/"


def refused(reason: str, *, age_days: int = 0) -> ReportMail:
    mail = ReportMail.objects.create(
        kind=AggregateKind.DMARC, outcome=ReportMailOutcome.REFUSED, reason=reason, envelope_from="r@x.test", raw=b"x"
    )
    ReportMail.objects.filter(pk=mail.pk).update(created_at=timezone.now() - timedelta(days=age_days))
    return mail


def test_refused_report_mail_is_listed_with_its_reason_escaped_and_cannot_be_edited(operator):
    mail = refused('not a report: <script>alert("x")</script>')

    page = operator.get(LIST).content.decode()

    assert "&lt;script&gt;" in page and "<script>alert" not in page
    detail = operator.get(f"{LIST}{mail.pk}/change/").content.decode()
    assert "1 bytes" in detail and 'name="reason"' not in detail  # shown, not an editable field
    assert operator.post(f"{LIST}{mail.pk}/change/", {"reason": "changed"}).status_code == 403
    assert operator.get(f"{LIST}add/").status_code == 403


def test_retention_purges_report_mail_and_tls_report_records_past_it_and_keeps_the_rest(settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    old, recent = refused("old", age_days=31), refused("recent", age_days=29)
    today = timezone.now().date()
    for day in (today - timedelta(days=31), today - timedelta(days=29)):
        TlsSessionCount.objects.create(
            day=day,
            policy_domain="x.test",
            policy_type=TlsPolicyType.values[0],
            policy_strings=[],
            policy_hash=str(day),
        )
        TlsReportSubmission.objects.create(
            day=day, policy_domain="x.test", rua="mailto:r@x.test", report_id=str(day), status=TlsReportStatus.SENT
        )

    deleted = report_data_purge()

    assert deleted == {"report mail": 1, "TLS session counts": 1, "TLS report submissions": 1}
    assert list(ReportMail.objects.values_list("pk", flat=True)) == [recent.pk] and old.pk != recent.pk
    assert list(TlsSessionCount.objects.values_list("day", flat=True)) == [today - timedelta(days=29)]
    assert list(TlsReportSubmission.objects.values_list("day", flat=True)) == [today - timedelta(days=29)]


def test_parsed_dmarc_and_tls_reports_outlive_their_mail_past_retention(settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    domain = DomainFactory(name="acme.test")
    now = timezone.now()
    period = {"begin": now - timedelta(days=32), "end": now - timedelta(days=31)}
    dmarc = DmarcReport.objects.create(
        domain=domain, org_name="google.com", report_id="d1", mail=refused("", age_days=31), **period
    )
    DmarcRecord.objects.create(report=dmarc, source_ip="192.0.2.1", count=3, dkim_aligned=True, spf_aligned=True)
    tls = TlsReport.objects.create(
        domain=domain,
        org_name="google.com",
        report_id="t1",
        successful_sessions=5,
        failed_sessions=1,
        mail=refused("", age_days=31),
        **period,
    )
    TlsReportFailure.objects.create(report=tls, result_type="certificate-expired", sessions=1)

    assert report_data_purge()["report mail"] == 2

    assert not ReportMail.objects.exists()
    assert list(DmarcReport.objects.values_list("report_id", "mail")) == [("d1", None)]
    assert list(TlsReport.objects.values_list("report_id", "mail")) == [("t1", None)]
    assert (DmarcRecord.objects.get().count, TlsReportFailure.objects.get().sessions) == (3, 1)

"""A report mail is only kept by the SMTP session's transaction and read by a task once it commits; one
whose task was lost is read by the sweep. (Celery runs tasks eagerly in these tests.)"""

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from messaging.inbound.aggregate.tasks import SWEEP_GRACE_SECONDS, aggregate_reports_sweep_task
from messaging.inbound.services import inbound_deliver
from messaging.models import AggregateKind, DmarcReport, ReportMail, ReportMailOutcome
from tests.factories import DomainFactory
from tests.inbound.test_dmarc_tls_reports import DOMAIN, report_mail

pytestmark = pytest.mark.django_db

RETURN_PATH_DOMAIN = "bounces.acme.example.com"
DMARC_TO = f"dmarc-reports@{RETURN_PATH_DOMAIN}"
GOOGLE = (Path(__file__).parent.parent / "fixtures" / "reports" / "google.xml").read_bytes()


@pytest.fixture(autouse=True)
def setup(settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = RETURN_PATH_DOMAIN
    settings.MAILSERVICE_DNS_RESOLVER = "127.0.0.1:9"  # nothing answers: no lookup leaves the machine
    settings.MAILSERVICE_DNS_TIMEOUT = 0.2
    settings.MAILSERVICE_REPORT_MAX_AGE_DAYS = 36500  # the fixture's period (November 2026) stays recent
    DomainFactory(name=DOMAIN)


def test_the_session_keeps_the_mail_and_the_report_is_read_once_it_commits(django_capture_on_commit_callbacks):
    raw = report_mail(GOOGLE, "text/xml", to=DMARC_TO)
    with django_capture_on_commit_callbacks() as callbacks:
        refused = inbound_deliver(
            envelope_from="noreply-dmarc-support@google.com",
            recipients=[DMARC_TO],
            raw=raw,
            peer_ip="192.0.2.7",
            helo="mail-yw1.google.com",
        )
    assert refused == []
    mail = ReportMail.objects.get()
    assert (mail.outcome, mail.peer_ip, mail.helo) == (ReportMailOutcome.RECEIVED, "192.0.2.7", "mail-yw1.google.com")
    assert not DmarcReport.objects.exists()  # nothing read in the session
    assert len(callbacks) == 1
    callbacks[0]()
    mail.refresh_from_db()
    assert (mail.outcome, mail.domain.name) == (ReportMailOutcome.STORED, DOMAIN)
    assert DmarcReport.objects.get().mail == mail


@pytest.mark.parametrize(("age", "read"), [(SWEEP_GRACE_SECONDS + 5, True), (SWEEP_GRACE_SECONDS - 5, False)])
def test_a_report_mail_whose_task_was_lost_is_read_by_the_sweep(age, read):
    mail = ReportMail.objects.create(
        kind=AggregateKind.DMARC,
        outcome=ReportMailOutcome.RECEIVED,
        envelope_from="noreply-dmarc-support@google.com",
        raw=report_mail(GOOGLE, "text/xml", to=DMARC_TO),
    )
    ReportMail.objects.filter(pk=mail.pk).update(created_at=timezone.now() - timedelta(seconds=age))
    assert aggregate_reports_sweep_task() == (1 if read else 0)
    mail.refresh_from_db()
    assert mail.outcome == (ReportMailOutcome.STORED if read else ReportMailOutcome.RECEIVED)

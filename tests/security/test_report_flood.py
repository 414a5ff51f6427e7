"""The DMARC report flood of issue 41, written as the attack: an outsider mails 6 forged 50,000-record
reports about a tenant's domain at once. Other inbound mail is stored within 2 s all the same (the
server only keeps a report mail; a worker reads it after the 250), the domain's daily row budget keeps
the reports past it as mail with the reason, and the tenant's console domain page renders in under 1 s.

The record cap (and the parsing budget) are raised here so that the forged reports reach storage and the daily budget
(MAILSERVICE_REPORT_DAILY_ROWS, 200,000 by default) is what stops them; at the default cap (20,000)
each is refused after reading its 20,001st record."""

import gzip
import smtplib
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart

import pytest
from django.test import Client
from django.urls import reverse

from messaging.models import DmarcRecord, DmarcReport, Message, ReportMail, ReportMailOutcome
from tests.dns_server import dns_server
from tests.factories import DomainFactory
from tests.harness import celery_worker, inbound_smtp_server, wait_until
from tests.harness.env import FAST_DISPATCH
from tests.inbound.mail import RETURN_PATH_DOMAIN, plain_mail, wire_bytes

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DOMAIN = "acme.example.com"
DMARC_TO = f"dmarc-reports@{RETURN_PATH_DOMAIN}"
REPORTS = 6
RECORDS = 50_000
CANARY_SECONDS = 2.0
PAGE_SECONDS = 1.0


@pytest.fixture(scope="module")
def inbound(django_db_setup) -> Iterator[int]:
    with dns_server() as (_zone, address):
        env = {
            "MAILSERVICE_RETURN_PATH_DOMAIN": RETURN_PATH_DOMAIN,
            "MAILSERVICE_DNS_RESOLVER": address,
            "MAILSERVICE_REPORT_MAX_RECORDS": str(RECORDS),
            # A 50,000-record report takes 4 to 9 s to read on 2 busy cores: past the default 5 s
            # budget it would be refused for its time, not kept by the daily budget under test.
            "MAILSERVICE_INBOUND_PARSE_SECONDS": "60",
        }
        with inbound_smtp_server(**env) as port, celery_worker(beat=False, **env, **FAST_DISPATCH):
            yield port


def forged_report(report_id: str) -> bytes:
    """50,000 records from as many addresses, mailed gzipped by someone who is not the reporter it names."""
    end = datetime.now(UTC) - timedelta(hours=1)
    record = (
        "<record><row><source_ip>10.{a}.{b}.{c}</source_ip><count>1000</count><policy_evaluated>"
        "<disposition>none</disposition><dkim>fail</dkim><spf>fail</spf></policy_evaluated></row>"
        f"<identifiers><header_from>{DOMAIN}</header_from></identifiers></record>"
    )
    records = "".join(record.format(a=n >> 16, b=(n >> 8) & 255, c=n & 255) for n in range(RECORDS))
    document = (
        "<feedback><report_metadata><org_name>google.com</org_name><email>noreply-dmarc-support@google.com</email>"
        f"<report_id>{report_id}</report_id><date_range><begin>{int((end - timedelta(days=1)).timestamp())}</begin>"
        f"<end>{int(end.timestamp())}</end></date_range></report_metadata>"
        f"<policy_published><domain>{DOMAIN}</domain><p>none</p></policy_published>{records}</feedback>"
    ).encode()
    mail = MIMEMultipart()
    mail["From"], mail["To"], mail["Subject"] = "noreply-dmarc-support@google.com", DMARC_TO, f"Report {report_id}"
    mail.attach(MIMEApplication(gzip.compress(document), "gzip", name=f"{report_id}.xml.gz"))
    return wire_bytes(mail)


def send(port: int, sender: str, to: str, raw: bytes) -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=60) as smtp:
        assert smtp.sendmail(sender, [to], raw) == {}


def canary_seconds(port: int, subject: str) -> float:
    """From connecting to the canary's message being stored."""
    raw = wire_bytes(plain_mail(sender="friend@example.org", to=f"hello@{DOMAIN}", subject=subject, text="hi"))
    started = time.monotonic()
    send(port, "friend@example.org", f"hello@{DOMAIN}", raw)
    wait_until(lambda: Message.objects.filter(subject=subject).exists(), timeout=30, interval=0.01, message=subject)
    return time.monotonic() - started


def page_seconds(client: Client, url: str) -> float:
    started = time.monotonic()
    response = client.get(url)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    return elapsed


def test_a_flood_of_forged_reports_delays_no_other_mail_and_no_console_page(inbound, admin_user, record_property):
    domain = DomainFactory(name=DOMAIN)
    reports = [forged_report(f"forged-{n}") for n in range(REPORTS)]
    flood = [
        threading.Thread(target=send, args=(inbound, "noreply-dmarc-support@google.com", DMARC_TO, raw))
        for raw in reports
    ]
    for thread in flood:
        thread.start()
    during_sending = canary_seconds(inbound, "canary while the reports are sent")
    for thread in flood:
        thread.join(timeout=120)
    assert ReportMail.objects.count() == REPORTS  # every report mail accepted and kept
    during_reading = canary_seconds(inbound, "canary while the reports are read")
    record_property("figure: canary stored while 6 reports were sent, s", round(during_sending, 3))
    record_property("figure: canary stored while the worker read them, s", round(during_reading, 3))
    assert during_sending < CANARY_SECONDS and during_reading < CANARY_SECONDS

    reading_started = time.monotonic()
    wait_until(
        lambda: not ReportMail.objects.filter(outcome=ReportMailOutcome.RECEIVED).exists(),
        timeout=300,
        interval=0.5,
        message="every report mail read",
    )
    record_property("figure: the worker read the 6 reports within, s", round(time.monotonic() - reading_started, 1))
    outcomes = sorted(ReportMail.objects.values_list("outcome", "reason"))
    budget_reason = "would pass its daily budget of 200000 (MAILSERVICE_REPORT_DAILY_ROWS)"
    assert [outcome for outcome, _ in outcomes] == ["refused"] * 2 + ["stored"] * 4
    assert all(budget_reason in reason for outcome, reason in outcomes if outcome == "refused")
    assert DmarcRecord.objects.count() == 4 * RECORDS
    assert not DmarcReport.objects.filter(authenticated=True).exists()

    client = Client()
    client.force_login(admin_user)
    url = reverse("admin:domains_domain_change", args=[domain.pk])
    client.get(url)  # the first request of a process loads templates and the URL map
    default = page_seconds(client, url)
    everything = page_seconds(client, f"{url}?reports=all")
    html = client.get(url).content.decode()
    record_property("figure: domain page (authenticated reports), s", round(default, 3))
    record_property("figure: domain page with every report (?reports=all), s", round(everything, 3))
    assert "0 authenticated DMARC reports" in html and "4 unauthenticated reports" in html
    assert default < PAGE_SECONDS

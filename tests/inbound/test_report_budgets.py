"""Reports within budgets (issue 41, item 2), read as the worker reads them (aggregate_process): records
per report, rows per domain and day, the period's window, one report per reporter and id, and
authentication (DKIM- or SPF-aligned with the report's email domain) against a DNS zone on loopback."""

import base64
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.management import call_command

from messaging.inbound.aggregate.services import aggregate_process, aggregate_receive
from messaging.models import AggregateKind, DmarcReport, ReportMail, ReportMailOutcome, TlsReport
from tests.dns_server import Zone, dns_server
from tests.factories import DomainFactory
from tests.inbound.mail import wire_bytes

pytestmark = pytest.mark.django_db

DOMAIN = "acme.example.com"
REPORTER = "reporter.example"
REPORTER_IP = "192.0.2.44"
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)


def key_record() -> str:
    public = KEY.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return f"v=DKIM1; k=rsa; p={base64.b64encode(public).decode()}"


@pytest.fixture
def zone(settings) -> Iterator[Zone]:
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        settings.MAILSERVICE_DNS_TIMEOUT = 2.0
        zone.publish_txt(f"sel._domainkey.{REPORTER}", key_record())
        zone.publish_txt(f"sel._domainkey.mail.{REPORTER}", key_record())
        zone.publish_txt(REPORTER, f"v=spf1 ip4:{REPORTER_IP} -all")
        yield zone


@pytest.fixture
def domain():
    return DomainFactory(name=DOMAIN)


def report_xml(*, records: int, report_id: str = "r1", email: str = f"dmarc@{REPORTER}", ended_ago: timedelta) -> bytes:
    end = datetime.now(UTC) - ended_ago
    begin = end - timedelta(days=1)
    record = (
        "<record><row><source_ip>192.0.2.{n}</source_ip><count>2</count><policy_evaluated>"
        "<disposition>none</disposition><dkim>pass</dkim><spf>fail</spf></policy_evaluated></row>"
        f"<identifiers><header_from>{DOMAIN}</header_from></identifiers></record>"
    )
    body = "".join(record.format(n=n % 250) for n in range(records))
    return (
        f"<feedback><report_metadata><org_name>Reporter</org_name><email>{email}</email>"
        f"<report_id>{report_id}</report_id><date_range><begin>{int(begin.timestamp())}</begin>"
        f"<end>{int(end.timestamp())}</end></date_range></report_metadata>"
        f"<policy_published><domain>{DOMAIN}</domain><p>none</p></policy_published>{body}</feedback>"
    ).encode()


def report_mail(document: bytes, *, sender: str = f"dmarc@{REPORTER}", signed_by: str = "") -> bytes:
    mail = MIMEMultipart()
    mail["From"], mail["To"], mail["Subject"] = sender, "dmarc-reports@bounces.example", "Report"
    mail.attach(MIMEApplication(document, "xml", name="report.xml"))
    raw = wire_bytes(mail)
    if not signed_by:
        return raw
    pem = KEY.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return dkim.sign(raw, b"sel", signed_by.encode(), pem, include_headers=[b"from", b"subject"]) + raw


def receive_and_read(
    raw: bytes, *, envelope_from: str = f"dmarc@{REPORTER}", peer_ip: str = "198.51.100.9"
) -> ReportMail:
    mail = aggregate_receive(
        kind=AggregateKind.DMARC, envelope_from=envelope_from, peer_ip=peer_ip, helo="mx.reporter.example", raw=raw
    )
    assert mail.outcome == ReportMailOutcome.RECEIVED
    read = aggregate_process(mail_id=mail.pk)
    assert read is not None
    assert aggregate_process(mail_id=mail.pk) is None  # a second delivery of the task does nothing
    return read


@pytest.mark.parametrize(("records", "stored"), [(20, True), (21, False)])
def test_a_report_over_the_record_cap_is_kept_as_mail_with_the_reason(zone, domain, settings, records, stored):
    settings.MAILSERVICE_REPORT_MAX_RECORDS = 20
    mail = receive_and_read(report_mail(report_xml(records=records, ended_ago=timedelta(hours=2))))
    assert (mail.outcome == ReportMailOutcome.STORED) is stored
    assert DmarcReport.objects.exists() is stored
    if not stored:
        assert "over 20 records (MAILSERVICE_REPORT_MAX_RECORDS)" in mail.reason


def test_a_domains_daily_row_budget_keeps_the_reports_past_it_as_mail(zone, domain, settings):
    settings.MAILSERVICE_REPORT_DAILY_ROWS = 25
    first = receive_and_read(report_mail(report_xml(records=15, report_id="a", ended_ago=timedelta(hours=2))))
    second = receive_and_read(report_mail(report_xml(records=10, report_id="b", ended_ago=timedelta(hours=2))))
    third = receive_and_read(report_mail(report_xml(records=1, report_id="c", ended_ago=timedelta(hours=2))))
    assert [first.outcome, second.outcome, third.outcome] == ["stored", "stored", "refused"]
    assert "hold 25 records today; 1 more would pass its daily budget of 25" in third.reason
    assert list(DmarcReport.objects.order_by("report_id").values_list("report_id", "rows")) == [("a", 15), ("b", 10)]


@pytest.mark.parametrize(
    ("ended_ago", "stored"),
    [
        (timedelta(days=58), True),  # began 59 days ago
        (timedelta(days=60), False),  # began 61 days ago
        (timedelta(hours=-23), True),  # ends 23 hours ahead
        (timedelta(hours=-25), False),
        (timedelta(days=-365 * 7975), False),  # the year 9999
    ],
)
def test_report_periods_outside_the_last_60_days_and_the_next_day_are_refused(zone, domain, ended_ago, stored):
    mail = receive_and_read(report_mail(report_xml(records=1, ended_ago=ended_ago)))
    assert (mail.outcome == ReportMailOutcome.STORED) is stored, mail.reason
    if not stored:
        assert "is outside [now - 60 days (MAILSERVICE_REPORT_MAX_AGE_DAYS), now + 1 day]" in mail.reason


def test_one_report_is_stored_per_reporter_and_report_id(zone, domain):
    raw = report_mail(report_xml(records=3, ended_ago=timedelta(hours=2)))
    outcomes = [receive_and_read(raw).outcome for _ in range(3)]
    assert outcomes == ["stored", "duplicate", "duplicate"]
    assert DmarcReport.objects.count() == 1


@pytest.mark.parametrize(
    ("signed_by", "envelope_from", "peer_ip", "authenticated"),
    [
        (REPORTER, "forger@elsewhere.example", "198.51.100.9", True),  # DKIM, aligned
        (f"mail.{REPORTER}", "forger@elsewhere.example", "198.51.100.9", True),  # DKIM, relaxed alignment
        ("", f"bounces@{REPORTER}", REPORTER_IP, True),  # SPF pass, aligned
        ("", f"bounces@{REPORTER}", "198.51.100.9", False),  # SPF fail
        ("", "forger@elsewhere.example", REPORTER_IP, False),  # SPF of a domain not the reporter's
        ("", "forger@elsewhere.example", "198.51.100.9", False),  # nothing
    ],
)
def test_a_report_is_authenticated_when_its_mail_aligns_with_the_reporters_domain(
    zone, domain, signed_by, envelope_from, peer_ip, authenticated
):
    raw = report_mail(report_xml(records=2, ended_ago=timedelta(hours=2)), signed_by=signed_by)
    mail = receive_and_read(raw, envelope_from=envelope_from, peer_ip=peer_ip)
    assert mail.outcome == ReportMailOutcome.STORED, mail.reason
    assert DmarcReport.objects.get().authenticated is authenticated


def test_a_forged_dkim_signature_for_the_reporter_does_not_authenticate(zone, domain):
    raw = report_mail(report_xml(records=2, ended_ago=timedelta(hours=2)), signed_by=REPORTER)
    tampered = raw.replace(b"Subject: Report", b"Subject: Report!", 1)  # a signed header changed
    assert tampered != raw
    receive_and_read(tampered, envelope_from="forger@elsewhere.example")
    assert DmarcReport.objects.get().authenticated is False


def summary(*extra: str) -> dict:
    out = io.StringIO()
    call_command("dmarc_summary", DOMAIN, "--json", *extra, stdout=out)
    return json.loads(out.getvalue())


def test_summaries_count_authenticated_reports_unless_asked_for_all(zone, domain):
    receive_and_read(
        report_mail(report_xml(records=3, report_id="real", ended_ago=timedelta(hours=2)), signed_by=REPORTER)
    )
    receive_and_read(report_mail(report_xml(records=5, report_id="forged", ended_ago=timedelta(hours=2))))
    counted = summary()
    assert (counted["reports"], counted["unauthenticated_reports"], counted["messages"]) == (1, 1, 6)
    everything = summary("--include-unauthenticated")
    assert (everything["reports"], everything["unauthenticated_reports"], everything["messages"]) == (2, 1, 16)


def tls_report_json(*, report_id: str) -> bytes:
    end = datetime.now(UTC) - timedelta(hours=2)
    return json.dumps(
        {
            "organization-name": "Reporter",
            "date-range": {"start-datetime": (end - timedelta(days=1)).isoformat(), "end-datetime": end.isoformat()},
            "contact-info": f"tlsrpt@{REPORTER}",
            "report-id": report_id,
            "policies": [
                {
                    "policy": {"policy-type": "sts", "policy-domain": DOMAIN},
                    "summary": {"total-successful-session-count": 10, "total-failure-session-count": 1},
                }
            ],
        }
    ).encode()


def test_a_tls_report_is_authenticated_by_its_contact_info_domain(zone, domain):
    for report_id, signed_by in [("real", REPORTER), ("forged", "")]:
        mail = MIMEMultipart()
        mail["From"], mail["To"], mail["Subject"] = f"tlsrpt@{REPORTER}", "tls-reports@bounces.example", "Report"
        mail.attach(MIMEApplication(tls_report_json(report_id=report_id), "tlsrpt+json", name="report.json"))
        raw = wire_bytes(mail)
        if signed_by:
            pem = KEY.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
            raw = dkim.sign(raw, b"sel", signed_by.encode(), pem, include_headers=[b"from", b"subject"]) + raw
        received = aggregate_receive(
            kind=AggregateKind.TLS, envelope_from="forger@elsewhere.example", peer_ip="198.51.100.9", helo="x", raw=raw
        )
        assert aggregate_process(mail_id=received.pk).outcome == ReportMailOutcome.STORED
    assert dict(TlsReport.objects.values_list("report_id", "authenticated")) == {"real": True, "forged": False}
    out = io.StringIO()
    call_command("tls_summary", DOMAIN, "--json", stdout=out)
    counted = json.loads(out.getvalue())
    assert (counted["reports"], counted["unauthenticated_reports"], counted["successful_sessions"]) == (1, 1, 10)

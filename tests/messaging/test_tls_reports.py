"""TLS-RPT (RFC 8460): sessions counted per report line, the day's report as the RFC's schema says, and
its submission to a policy domain's `rua`s: mail through the service's own (DKIM-signed) delivery,
https by POST to a loopback server with a test certificate. DNS is a real server on loopback."""

import email
import gzip
import json
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from email.message import EmailMessage
from email.policy import default
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dkim
import jsonschema
import pytest
from django.core.management import CommandError, call_command
from django.db import transaction

from mailservice import metrics
from messaging.models import Message, TlsReportSubmission, TlsSessionCount
from messaging.outbound.dispatch import dispatch_batch
from messaging.tasks import tls_reports_send_task
from messaging.tls_reports.counts import record_tls_outcome, tls_report
from messaging.tls_reports.sending import previous_utc_day, tls_reports_send
from tests.dns_server import Zone, dns_server
from tests.factories import DomainFactory, dkim_dnsfunc
from tests.harness import free_port, self_signed_certificate, smtp_sink

pytestmark = pytest.mark.django_db
# The counting UPSERT and the message store each have a one-statement path and an ORM twin.
both_paths = pytest.mark.usefixtures("sql_path")

SCHEMA = json.loads((Path(__file__).parents[1] / "fixtures" / "tlsrpt-schema.json").read_text())
STS_POLICY = ["version: STSv1", "mode: enforce", "mx: *.mail.example.test", "max_age: 86400"]


def today() -> date:
    return datetime.now(UTC).date()


@pytest.fixture
def zone(settings) -> Iterator[Zone]:
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        settings.MAILSERVICE_DNS_TIMEOUT = 2.0
        yield zone


@pytest.fixture
def reporter_domain(settings):
    settings.MAILSERVICE_TLSRPT_FROM = "tls-reports@acme.test"
    return DomainFactory(name="acme.test")


def count_sessions() -> None:
    """A day of example.test: MTA-STS sessions to two hosts, one failing twice, and a DANE failure."""
    sts = {"policy_domain": "example.test", "policy_type": "sts", "policy_strings": STS_POLICY}
    record_tls_outcome(**sts, mx_host="mx1.mail.example.test", receiving_ip="192.0.2.1")
    record_tls_outcome(**sts, mx_host="mx1.mail.example.test", receiving_ip="192.0.2.1")
    for _ in range(2):
        record_tls_outcome(
            **sts, mx_host="MX2.mail.example.test.", receiving_ip="192.0.2.2", result_type="certificate-expired"
        )
    tlsa = ["_25._tcp.mx3.example.test. IN TLSA 3 1 1 abcdef"]
    record_tls_outcome(
        policy_domain="example.test",
        policy_type="tlsa",
        policy_strings=tlsa,
        mx_host="mx3.example.test",
        receiving_ip="2001:db8::3",
        result_type="tlsa-invalid",
    )


def report_of(day: date, domain: str = "example.test") -> dict:
    return tls_report(day=day, policy_domain=domain, organization="acme.test", contact="c@acme.test", report_id="r1")


@both_paths
def test_each_session_counts_once_on_its_report_line():
    count_sessions()

    lines = TlsSessionCount.objects.filter(day=today()).order_by("mx_host")
    assert [(row.mx_host, row.receiving_ip, row.result_type, row.sessions) for row in lines] == [
        ("mx1.mail.example.test", "192.0.2.1", "", 2),
        ("mx2.mail.example.test", "192.0.2.2", "certificate-expired", 2),
        ("mx3.example.test", "2001:db8::3", "tlsa-invalid", 1),
    ]


@both_paths
def test_a_count_that_fails_is_logged_and_leaves_the_callers_transaction_usable(caplog):
    with transaction.atomic():
        # PostgreSQL refuses a NUL character in text: a real database error inside the caller's transaction.
        record_tls_outcome(
            policy_domain="bad\x00.test", policy_type="no-policy-found", policy_strings=[], mx_host="", receiving_ip=""
        )
        record_tls_outcome(
            policy_domain="good.test", policy_type="no-policy-found", policy_strings=[], mx_host="", receiving_ip=""
        )

    assert list(TlsSessionCount.objects.values_list("policy_domain", "sessions")) == [("good.test", 1)]
    assert "session of bad" in caplog.text


def test_an_unknown_result_type_is_not_counted():
    record_tls_outcome(
        policy_domain="x.test", policy_type="sts", policy_strings=[], mx_host="", receiving_ip="", result_type="nope"
    )
    assert not TlsSessionCount.objects.exists()


def test_the_report_follows_rfc_8460s_schema_and_sums_the_day():
    count_sessions()

    report = report_of(today())

    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    sts, tlsa = report["policies"]
    assert sts["policy"] == {
        "policy-type": "sts",
        "policy-domain": "example.test",
        "policy-string": STS_POLICY,
        "mx-host": ["*.mail.example.test"],
    }
    assert sts["summary"] == {"total-successful-session-count": 2, "total-failure-session-count": 2}
    assert sts["failure-details"] == [
        {
            "result-type": "certificate-expired",
            "failed-session-count": 2,
            "receiving-mx-hostname": "mx2.mail.example.test",
            "receiving-ip": "192.0.2.2",
        }
    ]
    assert tlsa["policy"]["mx-host"] == ["mx3.example.test"]
    assert tlsa["summary"] == {"total-successful-session-count": 0, "total-failure-session-count": 1}
    start = today().isoformat()
    assert report["date-range"] == {"start-datetime": f"{start}T00:00:00Z", "end-datetime": f"{start}T23:59:59Z"}


def attachment_of(message: Message) -> tuple[EmailMessage, EmailMessage]:
    parsed = email.message_from_bytes(bytes(message.raw), policy=default)
    assert isinstance(parsed, EmailMessage)
    (part,) = parsed.iter_attachments()
    return parsed, part


@both_paths
def test_a_mailto_report_becomes_a_message_from_the_reporter_that_dispatch_signs(settings, zone, reporter_domain):
    count_sessions()
    zone.publish_txt("_smtp._tls.example.test", "v=TLSRPTv1; rua=mailto:tls%2Brpt@example.test")
    zone.publish_txt("_smtp._tls.example.test", "v=spf1 -all")  # another TXT record does not count

    call_command("send_tls_reports", "--date", today().isoformat())

    message = Message.objects.get()
    submission = TlsReportSubmission.objects.get()
    assert (message.from_address, message.envelope_recipients) == ("tls-reports@acme.test", ["tls+rpt@example.test"])
    parsed, part = attachment_of(message)
    report_id = submission.report_id
    assert parsed["Subject"] == f"Report Domain: example.test Submitter: acme.test Report-ID: <{report_id}>"
    assert (parsed["TLS-Report-Domain"], parsed["TLS-Report-Submitter"]) == ("example.test", "acme.test")
    assert parsed.get_content_type() == "multipart/report"
    assert parsed.get_param("report-type") == "tlsrpt"
    assert part.get_content_type() == "application/tlsrpt+gzip"
    start = int(datetime(today().year, today().month, today().day, tzinfo=UTC).timestamp())
    assert part.get_filename() == f"acme.test!example.test!{start}!{start + 86399}!{report_id}.json.gz"
    report = json.loads(gzip.decompress(part.get_content()))
    jsonschema.Draft202012Validator(SCHEMA).validate(report)
    assert (report["report-id"], report["contact-info"]) == (report_id, "tls-reports@acme.test")

    # Dispatch sends it like any message, DKIM-signed by the reporter's domain.
    settings.EMAIL_URL, settings.MAILSERVICE_MX_PORT, settings.MAILSERVICE_SMTP_TIMEOUT = "mx://", free_port(), 5.0
    zone.publish_mx("example.test", "mx.example.test")
    zone.publish_address("mx.example.test", "127.0.0.2")
    with smtp_sink(host="127.0.0.2", port=settings.MAILSERVICE_MX_PORT) as receiver:
        dispatch_batch(public_id=message.public_id)
    (received,) = receiver.received
    assert received.rcpt_tos == ["tls+rpt@example.test"]
    assert dkim.verify(received.data, dnsfunc=dkim_dnsfunc(reporter_domain))


class ReportHandler(BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]]

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, self.headers["Content-Type"], body))
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def https_report_server(tmp_path: Path, host: str) -> Iterator[tuple[int, Path, list]]:
    """An HTTPS server on 127.0.0.3 with a certificate for `host`; yields (port, its certificate, requests)."""
    cert, key = self_signed_certificate(tmp_path, host=host)
    received: list[tuple[str, str, bytes]] = []
    handler = type("Handler", (ReportHandler,), {"received": received})
    server = ThreadingHTTPServer(("127.0.0.3", free_port()), handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1], cert, received
    finally:
        server.shutdown()
        server.server_close()


def test_an_https_report_is_posted_gzipped_and_a_second_run_sends_nothing_new(
    settings, zone, reporter_domain, tmp_path, capsys
):
    count_sessions()
    with https_report_server(tmp_path, "reports.example.test") as (port, cert, received):
        settings.MAILSERVICE_TLS_CA_FILE = str(cert)
        zone.publish_address("reports.example.test", "127.0.0.3")
        rua = f"https://reports.example.test:{port}/v1/tlsrpt,mailto:rpt@example.test"
        zone.publish_txt("_smtp._tls.example.test", f"v=TLSRPTv1; rua={rua}")

        call_command("send_tls_reports", "--date", today().isoformat())
        call_command("send_tls_reports", "--date", today().isoformat())

    ((path, content_type, body),) = received
    assert (path, content_type) == ("/v1/tlsrpt", "application/tlsrpt+gzip")
    jsonschema.Draft202012Validator(SCHEMA).validate(json.loads(gzip.decompress(body)))
    assert Message.objects.count() == 1
    assert sorted(TlsReportSubmission.objects.values_list("status", flat=True)) == ["sent", "sent"]
    first, second = capsys.readouterr().out.split("report submission(s) considered\n")[:2]
    assert "posted, HTTP 201" in first and "queued as msg_" in first
    assert second.count("already sent") == 2


def test_an_https_rua_on_a_private_address_is_refused_unless_allowed(settings, zone, reporter_domain, capsys):
    settings.MAILSERVICE_MX_ALLOW_PRIVATE = False
    count_sessions()
    zone.publish_address("reports.example.test", "127.0.0.3")
    zone.publish_txt("_smtp._tls.example.test", "v=TLSRPTv1; rua=https://reports.example.test/tlsrpt")

    call_command("send_tls_reports", "--date", today().isoformat())

    assert "resolves only to private or loopback addresses (127.0.0.3)" in capsys.readouterr().out
    assert not TlsReportSubmission.objects.exists()


@pytest.mark.parametrize(
    "records",
    [[], ["v=spf1 -all"], ["v=TLSRPTv1; rua=mailto:a@example.test", "v=TLSRPTv1; rua=mailto:b@example.test"]],
    ids=["none", "another kind", "two"],
)
def test_without_exactly_one_tlsrpt_record_no_report_is_sent(zone, reporter_domain, capsys, records):
    count_sessions()
    for record in records:
        zone.publish_txt("_smtp._tls.example.test", record)

    call_command("send_tls_reports", "--date", today().isoformat())

    assert "example.test: no TLSRPT record (_smtp._tls), no report" in capsys.readouterr().out
    assert not Message.objects.exists() and not TlsReportSubmission.objects.exists()


def test_without_a_reporter_address_nothing_is_sent(settings, zone, capsys):
    settings.MAILSERVICE_TLSRPT_FROM = ""
    count_sessions()
    zone.publish_txt("_smtp._tls.example.test", "v=TLSRPTv1; rua=mailto:rpt@example.test")

    call_command("send_tls_reports", "--date", today().isoformat())

    assert capsys.readouterr().out == "No TLS reports sent: MAILSERVICE_TLSRPT_FROM is unset.\n"
    assert not Message.objects.exists()


def test_a_reporter_on_an_unverified_domain_is_refused(settings):
    settings.MAILSERVICE_TLSRPT_FROM = "tls-reports@acme.test"
    DomainFactory(name="acme.test", verified=False)

    with pytest.raises(CommandError, match=r"^MAILSERVICE_TLSRPT_FROM: .*verified"):
        call_command("send_tls_reports")


def test_the_date_must_be_a_date():
    with pytest.raises(CommandError, match="is not a date"):
        call_command("send_tls_reports", "--date", "yesterday")


def test_the_daily_beat_task_reports_yesterday(settings, zone, reporter_domain):
    yesterday = previous_utc_day()
    TlsSessionCount.objects.create(
        day=yesterday, policy_domain="example.test", policy_type="no-policy-found", sessions=3
    )
    record_tls_outcome(  # today's: not in yesterday's report
        policy_domain="today.test", policy_type="no-policy-found", policy_strings=[], mx_host="", receiving_ip=""
    )
    zone.publish_txt("_smtp._tls.example.test", "v=TLSRPTv1; rua=mailto:rpt@example.test")
    zone.publish_txt("_smtp._tls.today.test", "v=TLSRPTv1; rua=mailto:rpt@today.test")

    assert settings.CELERY_BEAT_SCHEDULE["tls-reports-send"]["task"] == tls_reports_send_task.name
    assert tls_reports_send_task() == 1

    (part,) = [attachment_of(message)[1] for message in Message.objects.all()]
    report = json.loads(gzip.decompress(part.get_content()))
    assert report["date-range"]["start-datetime"] == f"{yesterday.isoformat()}T00:00:00Z"
    assert report["policies"][0]["summary"]["total-successful-session-count"] == 3


def flood(zone: Zone, rua: str, domains: int = 20, *, attacker: str = "attacker.test") -> list[str]:
    """`domains` subdomains of `attacker`, each delivered to today and publishing `rua` at a third party."""
    names = [f"d{n:02d}.{attacker}" for n in range(domains)]
    for name in names:
        record_tls_outcome(
            policy_domain=name, policy_type="no-policy-found", policy_strings=[], mx_host=f"mx.{name}", receiving_ip=""
        )
        zone.publish_txt(f"_smtp._tls.{name}", f"v=TLSRPTv1; rua={rua}")
    return names


def skipped_count() -> float:
    return metrics.TLS_REPORTS_SKIPPED._value.get()


def test_20_policy_domains_naming_one_victim_mailbox_get_it_5_reports_a_day(settings, zone, reporter_domain):
    flood(zone, "mailto:victim@third.test", domains=10)
    flood(zone, "mailto:Victim@THIRD.test", attacker="other.test")  # the same mailbox, spelt otherwise
    skipped_before = skipped_count()

    results = tls_reports_send(day=today()) or []

    assert sum(result.outcome.startswith("queued as") for result in results) == 5
    assert skipped_count() - skipped_before == 25
    again = tls_reports_send(day=today()) or []  # the run again: nothing more
    assert not [result for result in again if result.outcome.startswith("queued as")]
    # Counted where the mail arrives: the victim's MX.
    settings.EMAIL_URL, settings.MAILSERVICE_MX_PORT, settings.MAILSERVICE_SMTP_TIMEOUT = "mx://", free_port(), 5.0
    zone.publish_mx("third.test", "mx.third.test")
    zone.publish_address("mx.third.test", "127.0.0.2")
    with smtp_sink(host="127.0.0.2", port=settings.MAILSERVICE_MX_PORT) as victim:
        for public_id in Message.objects.values_list("public_id", flat=True):
            dispatch_batch(public_id=public_id)
    assert len(victim.received) == 5
    assert TlsReportSubmission.objects.count() == 5


def test_20_policy_domains_naming_one_victim_host_get_it_5_posts_a_day(settings, zone, reporter_domain, tmp_path):
    with https_report_server(tmp_path, "collector.third.test") as (port, cert, received):
        settings.MAILSERVICE_TLS_CA_FILE = str(cert)
        zone.publish_address("collector.third.test", "127.0.0.3")
        names = flood(zone, f"https://collector.third.test:{port}/tlsrpt")

        results = tls_reports_send(day=today()) or []

    assert len(received) == 5
    assert [result.policy_domain for result in results if result.outcome.startswith("posted")] == names[:5]
    assert all("MAILSERVICE_TLSRPT_MAX_PER_RUA" in result.outcome for result in results[5:])


@pytest.mark.parametrize(("limit", "sent"), [(1, 1), (25, 20)])
def test_the_daily_cap_per_rua_is_the_setting(settings, zone, reporter_domain, limit, sent):
    settings.MAILSERVICE_TLSRPT_MAX_PER_RUA = limit
    flood(zone, "mailto:victim@third.test")

    results = tls_reports_send(day=today()) or []

    assert sum(result.outcome.startswith("queued as") for result in results) == sent

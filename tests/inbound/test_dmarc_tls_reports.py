"""DMARC aggregate and SMTP TLS reports sent to the inbound server as reporters send them, read back
by dmarc_summary and tls_summary; hostile reports are refused or bounded and the server keeps serving.
The server keeps each report mail and answers 250; a Celery worker reads it (messaging/inbound/aggregate/tasks.py),
so each test waits for the mails it sent to be read. The reporters' mails here are not DKIM-signed, so
their reports are unauthenticated and both summaries are asked for with --include-unauthenticated."""

import functools
import gzip
import io
import json
import smtplib
import struct
import zipfile
import zlib
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText
from pathlib import Path
from xml.etree import ElementTree

import pytest
from django.core.management import call_command

from messaging.models import DmarcRecord, DmarcReport, ReportMail, ReportMailOutcome, TlsReport
from tests.dns_server import Zone, dns_server
from tests.factories import DomainFactory
from tests.harness import celery_worker, inbound_smtp_server, wait_until
from tests.harness.env import FAST_DISPATCH
from tests.inbound.mail import RETURN_PATH_DOMAIN, wire_bytes

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

FIXTURES = Path(__file__).parent.parent / "fixtures" / "reports"
DMARC_FIXTURES = ["google.xml", "yahoo.xml", "outlook.xml", "mailru.xml", "rfc9990.xml"]
TLS_FIXTURES = ["google-tls.json", "microsoft-tls.json", "mailru-tls.json"]
DOMAIN = "acme.example.com"
DMARC_TO = f"dmarc-reports@{RETURN_PATH_DOMAIN}"
TLS_TO = f"tls-reports@{RETURN_PATH_DOMAIN}"
INBOUND_MAX_BYTES = 25 * 1024 * 1024  # the default
REPORT_MAX_BYTES = 4 * 1024 * 1024  # under the default 20 MiB, so a report over it is quick to send
GIB = 1024**3
SPOOFER = "8.8.4.4"  # a failing source in several fixtures, with a PTR in the test zone


@pytest.fixture(scope="module")
def zone() -> Iterator[Zone]:
    with dns_server() as (zone, address):
        zone.address = address  # type: ignore[attr-defined]
        yield zone


@pytest.fixture(scope="module")
def inbound(django_db_setup, zone) -> Iterator[int]:
    zone.publish_ptr(SPOOFER, "spoofer.example.net")
    env = {
        "MAILSERVICE_RETURN_PATH_DOMAIN": RETURN_PATH_DOMAIN,
        "MAILSERVICE_DNS_RESOLVER": zone.address,  # type: ignore[attr-defined]
        "MAILSERVICE_INBOUND_MAX_BYTES": str(INBOUND_MAX_BYTES),
        "MAILSERVICE_REPORT_MAX_BYTES": str(REPORT_MAX_BYTES),
        # The fixtures' periods end in November 2026: recent enough whenever the suite runs.
        "MAILSERVICE_REPORT_MAX_AGE_DAYS": "36500",
    }
    with inbound_smtp_server(**env) as port, celery_worker(beat=False, **env, **FAST_DISPATCH):
        yield port


def all_read() -> None:
    """Wait for the worker to read every report mail received so far."""
    wait_until(
        lambda: not ReportMail.objects.filter(outcome=ReportMailOutcome.RECEIVED).exists(),
        timeout=60,
        message="every report mail read",
    )


@pytest.fixture
def domain():
    return DomainFactory(name=DOMAIN)


def packed(document: bytes, container: str, name: str) -> tuple[bytes, str]:
    """The attachment as reporters send it: (bytes, content type)."""
    if container == "gzip":
        return gzip.compress(document), "application/gzip"
    if container == "zip":
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
            archive.writestr(name, document)
        return buffer.getvalue(), "application/zip"
    return document, "application/json" if name.endswith(".json") else "text/xml"


def report_mail(attachment: bytes, content_type: str, *, to: str, filename: str = "report") -> bytes:
    mail = MIMEMultipart()
    mail["From"], mail["To"] = "noreply-dmarc-support@google.com", to
    mail["Subject"] = f"Report Domain: {DOMAIN} Submitter: google.com"
    mail.attach(MIMEText("This is an aggregate report from google.com.", "plain"))
    maintype, subtype = content_type.split("/")
    part = MIMEApplication(attachment, subtype, name=filename) if maintype == "application" else None
    if part is None:
        part = MIMEApplication(attachment, "octet-stream", name=filename)
        part.replace_header("Content-Type", f'{content_type}; name="{filename}"')
    part.add_header("Content-Disposition", "attachment", filename=filename)
    mail.attach(part)
    return wire_bytes(mail)


def send(port: int, raw: bytes, *, to: str) -> tuple[int, bytes]:
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.ehlo()
        smtp.mail("noreply-dmarc-support@google.com")
        smtp.rcpt(to)
        return smtp.data(raw)


def send_fixture(port: int, name: str, container: str) -> None:
    to = TLS_TO if name.endswith(".json") else DMARC_TO
    attachment, content_type = packed((FIXTURES / name).read_bytes(), container, name)
    assert send(port, report_mail(attachment, content_type, to=to), to=to)[0] == 250
    all_read()


def summary(command: str, days: int) -> dict:
    out = io.StringIO()
    call_command(command, DOMAIN, "--days", str(days), "--include-unauthenticated", "--json", stdout=out)
    return json.loads(out.getvalue())


def covering_days() -> int:
    """A window that covers every fixture's period (they end on 2026-11-19 or 20)."""
    return (datetime.now(UTC) - datetime(2026, 11, 19, tzinfo=UTC)).days + 2


# --- Expected figures, from the fixture files with the standard library ---------------------------


def _local(element: ElementTree.Element) -> str:
    return element.tag.rpartition("}")[2]


def _find(element: ElementTree.Element, path: str) -> str:
    for name in path.split("/"):
        element = next(child for child in element if _local(child) == name)
    return (element.text or "").strip()


def expected_dmarc(names: list[str]) -> dict:
    totals: Counter[str] = Counter()
    sources: dict[str, Counter[str]] = {}
    for name in names:
        root = ElementTree.parse(FIXTURES / name).getroot()  # noqa: S314 - the test's own files
        for record in (child for child in root if _local(child) == "record"):
            count = int(_find(record, "row/count"))
            dkim = _find(record, "row/policy_evaluated/dkim") == "pass"
            spf = _find(record, "row/policy_evaluated/spf") == "pass"
            source = sources.setdefault(_find(record, "row/source_ip"), Counter())
            source["messages"] += count
            source["dmarc_pass"] += count if dkim or spf else 0
            totals["messages"] += count
            totals["dmarc_pass"] += count if dkim or spf else 0
            totals["dkim_aligned_pass"] += count if dkim else 0
            totals["spf_aligned_pass"] += count if spf else 0
    ordered = sorted(sources.items(), key=lambda item: (-item[1]["messages"], item[0]))
    return {
        "domain": DOMAIN,
        "reports": len(names),
        "unauthenticated_reports": len(names),
        **totals,
        "sources": [{"source_ip": ip, "messages": c["messages"], "dmarc_pass": c["dmarc_pass"]} for ip, c in ordered],
    }


def expected_tls(names: list[str]) -> dict:
    successful = failed = 0
    failures: Counter[str] = Counter()
    for name in names:
        for policy in json.loads((FIXTURES / name).read_text())["policies"]:
            successful += policy["summary"]["total-successful-session-count"]
            failed += policy["summary"]["total-failure-session-count"]
            for detail in policy.get("failure-details", []):
                failures[detail["result-type"]] += detail["failed-session-count"]
    ordered = sorted(failures.items(), key=lambda item: (-item[1], item[0]))
    return {
        "domain": DOMAIN,
        "reports": len(names),
        "unauthenticated_reports": len(names),
        "successful_sessions": successful,
        "failed_sessions": failed,
        "failures": [{"result_type": kind, "sessions": sessions} for kind, sessions in ordered],
    }


# --- Real reports ---------------------------------------------------------------------------------


def test_reports_from_every_reporter_in_every_container_are_summarised(inbound, domain):
    days = covering_days()
    for container in ("plain", "gzip", "zip"):
        # Each container is counted on its own (a report outlives its mail, which retention deletes).
        for stored in (DmarcReport, TlsReport, ReportMail):
            stored.objects.all().delete()
        for name in DMARC_FIXTURES + TLS_FIXTURES:
            send_fixture(inbound, name, container)
        assert summary("dmarc_summary", days) == expected_dmarc(DMARC_FIXTURES), container
        assert summary("tls_summary", days) == expected_tls(TLS_FIXTURES), container
        assert set(ReportMail.objects.values_list("outcome", flat=True)) == {ReportMailOutcome.STORED}


def test_a_report_sent_again_is_counted_once(inbound, domain):
    for container in ("plain", "gzip", "zip"):
        send_fixture(inbound, "google.xml", container)
        send_fixture(inbound, "microsoft-tls.json", container)
    days = covering_days()
    assert summary("dmarc_summary", days) == expected_dmarc(["google.xml"])
    assert summary("tls_summary", days) == expected_tls(["microsoft-tls.json"])
    assert Counter(ReportMail.objects.values_list("outcome", flat=True)) == {"stored": 2, "duplicate": 4}


def test_summaries_cover_reports_ending_within_the_window(inbound, domain):
    send_fixture(inbound, "yahoo.xml", "plain")
    ended = DmarcReport.objects.get().end
    days_ago = (datetime.now(UTC) - ended).days  # whole days: at least 1, the fixture's period is past
    assert summary("dmarc_summary", days_ago + 1)["reports"] == 1
    assert summary("dmarc_summary", days_ago)["reports"] == 0


def test_failing_sources_keep_their_reverse_name(inbound, domain):
    send_fixture(inbound, "google.xml", "gzip")
    names = dict(DmarcRecord.objects.values_list("source_ip", "reverse_name"))
    # Looked up only for failing sources with a global address: 203.0.113.25 passes and is documentation space.
    assert names == {"203.0.113.25": "", "2001:db8:4860::1b": "", SPOOFER: "spoofer.example.net"}


# --- Hostile reports ------------------------------------------------------------------------------


@functools.cache
def _zeros() -> tuple[bytes, int]:
    """One GiB of zero bytes as a raw deflate stream (1 MiB segments, each fully flushed, so all are
    the same bytes: about 1 MB in all) and its CRC-32."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    chunk = bytes(1024 * 1024)
    segment = compressor.compress(chunk) + compressor.flush(zlib.Z_FULL_FLUSH)
    crc = 0
    for _ in range(GIB // len(chunk)):
        crc = zlib.crc32(chunk, crc)
    return segment * (GIB // len(chunk)) + b"\x03\x00", crc  # + an empty final block


def gzip_bomb() -> bytes:
    deflated, crc = _zeros()
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + deflated + struct.pack("<II", crc, GIB % 2**32)


def zip_bomb() -> bytes:
    """A zip of one 1 GiB member, written field by field (APPNOTE 4.3)."""
    deflated, crc = _zeros()
    name = b"report.xml"
    local = struct.pack("<4s5H3L2H", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(deflated), GIB, len(name), 0)
    central = struct.pack(
        "<4s6H3L5H2L", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(deflated), GIB, len(name), 0, 0, 0, 0, 0, 0
    )
    offset = len(local) + len(name) + len(deflated)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 1, 1, len(central) + len(name), offset, 0)
    return local + name + deflated + central + name + end


XXE = b"""<?xml version="1.0"?>
<!DOCTYPE feedback [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<feedback><report_metadata><org_name>&xxe;</org_name></report_metadata></feedback>"""
# Ten entities each ten times the previous: 10^9 "lol"s, 3 GB, if any parser expanded them.
_ENTITIES = '<!ENTITY lol0 "lol">' + "".join(f'<!ENTITY lol{n} "{f"&lol{n - 1};" * 10}">' for n in range(1, 10))
LAUGHS = f"""<?xml version="1.0"?>
<!DOCTYPE feedback [{_ENTITIES}]>
<feedback><report_metadata><org_name>&lol9;</org_name></report_metadata></feedback>""".encode()


def _fixture(name: str, old: str, new: str) -> bytes:
    text = (FIXTURES / name).read_text()
    assert old in text
    return text.replace(old, new, 1).encode()


def _two_member_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("a.xml", (FIXTURES / "google.xml").read_bytes())
        archive.writestr("../../etc/b.xml", (FIXTURES / "yahoo.xml").read_bytes())
    return buffer.getvalue()


HOSTILE = {
    "gzip-bomb": (gzip_bomb, "application/gzip", DMARC_TO, f"expands beyond {REPORT_MAX_BYTES} bytes"),
    "zip-bomb": (zip_bomb, "application/zip", DMARC_TO, f"expands beyond {REPORT_MAX_BYTES} bytes"),
    "tls-gzip-bomb": (gzip_bomb, "application/tlsrpt+gzip", TLS_TO, f"expands beyond {REPORT_MAX_BYTES} bytes"),
    "external-entity": (lambda: XXE, "text/xml", DMARC_TO, "DTDForbidden"),
    "billion-laughs": (lambda: LAUGHS, "text/xml", DMARC_TO, "DTDForbidden"),
    "two-files-in-zip": (_two_member_zip, "application/zip", DMARC_TO, "holds 2 files, not one"),
    "corrupt-gzip": (lambda: gzip.compress(b"<feedback/>")[:-12], "application/gzip", DMARC_TO, "gzip report is"),
    "unknown-domain": (
        lambda: _fixture("yahoo.xml", "<domain>acme.example.com</domain>", "<domain>other.example</domain>"),
        "text/xml",
        DMARC_TO,
        "other.example, a domain this service does not know",
    ),
    "tls-unknown-domain": (
        lambda: _fixture("google-tls.json", '"policy-domain":"acme.example.com"', '"policy-domain":"other.example"'),
        "application/json",
        TLS_TO,
        "no domain this service knows",
    ),
    "malformed-date": (
        lambda: _fixture("yahoo.xml", "<begin>1795046400</begin>", "<begin>2026-11-19</begin>"),
        "text/xml",
        DMARC_TO,
        "date_range/begin is not a Unix time: '2026-11-19'",
    ),
    "date-out-of-range": (
        lambda: _fixture("yahoo.xml", "<end>1795132799</end>", "<end>99999999999999999999</end>"),
        "text/xml",
        DMARC_TO,
        "date_range/end is not a Unix time",
    ),
    "malformed-ip": (
        lambda: _fixture("yahoo.xml", "<source_ip>198.51.100.77</source_ip>", "<source_ip>198.51.100.777</source_ip>"),
        "text/xml",
        DMARC_TO,
        "record 2: source_ip '198.51.100.777' is not an IP address",
    ),
    "negative-count": (
        lambda: _fixture("yahoo.xml", "<count>3</count>", "<count>-3</count>"),
        "text/xml",
        DMARC_TO,
        "record 2: count '-3' is not a count of messages",
    ),
    "tls-malformed-date": (
        lambda: _fixture("google-tls.json", "2026-11-19T23:59:59Z", "2026-13-45T99:00:00Z"),
        "application/json",
        TLS_TO,
        "date-range/end-datetime is not a date-time",
    ),
    "tls-count-not-a-number": (
        lambda: _fixture("google-tls.json", '"total-failure-session-count":0', '"total-failure-session-count":"0"'),
        "application/json",
        TLS_TO,
        "total-failure-session-count is not a count of sessions",
    ),
    "over-the-report-cap": (
        lambda: b"<feedback>" + b" " * REPORT_MAX_BYTES + b"</feedback>",
        "text/xml",
        DMARC_TO,
        f"report is larger than {REPORT_MAX_BYTES} bytes",
    ),
    "not-a-report": (lambda: b"<html><body>hello</body></html>", "text/xml", DMARC_TO, "no <feedback> element"),
}


def test_hostile_reports_are_kept_with_the_reason_and_the_server_keeps_serving(inbound, domain):
    for case, (build, content_type, to, reason) in HOSTILE.items():
        code, _ = send(inbound, report_mail(build(), content_type, to=to, filename="report"), to=to)
        assert code == 250, case  # stored: the reporter must not retry it
        all_read()
        mail = ReportMail.objects.latest("id")
        assert (mail.outcome, reason in mail.reason) == (ReportMailOutcome.REFUSED, True), (case, mail.reason)
    assert not DmarcReport.objects.exists() and not TlsReport.objects.exists()
    send_fixture(inbound, "google.xml", "zip")
    assert DmarcReport.objects.count() == 1


def test_a_50_mb_report_is_refused_at_mail_from(inbound, domain):
    """Over the inbound size limit: refused before its data is sent (SIZE, RFC 1870). The same report
    sent without SIZE gets 552 after its data (tests/inbound/test_inbound_live.py)."""
    size = 50 * 1024 * 1024
    with smtplib.SMTP("127.0.0.1", inbound, timeout=10) as smtp:
        smtp.ehlo()
        assert smtp.mail("noreply-dmarc-support@google.com", [f"SIZE={size}"])[0] == 552
    send_fixture(inbound, "google.xml", "plain")
    assert DmarcReport.objects.count() == 1

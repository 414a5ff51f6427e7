"""The DMARC report parser on its own (messaging/inbound/aggregate/dmarc.py): it reads what a lenient
reader reads, refuses only what none can count, and stays fast on hostile documents of the size the
server accepts (MAILSERVICE_REPORT_MAX_BYTES, 20 MiB by default)."""

import time

import pytest

from messaging.inbound.aggregate import ReportRefused
from messaging.inbound.aggregate.dmarc import dmarc_parse

REPORT_MAX_BYTES = 20 * 1024 * 1024
PARSE_SECONDS = 5.0  # MAILSERVICE_INBOUND_PARSE_SECONDS: report mails are read within it
CHUNK_SECONDS = 1.5  # one 64 KiB chunk past the deadline, on 2 busy cores

METADATA = (
    "<report_metadata><org_name>Reporter</org_name><email>dmarc@reporter.example</email>"
    "<report_id>r1</report_id><date_range><begin>1795046400</begin><end>1795132799</end></date_range>"
    "</report_metadata>"
)
POLICY = "<policy_published><domain>acme.example.com</domain><p>reject</p></policy_published>"
RECORD = (
    "<record><row><source_ip>192.0.2.1</source_ip><count>3</count><policy_evaluated><disposition>none"
    "</disposition><dkim>pass</dkim><spf>fail</spf></policy_evaluated></row><identifiers><header_from>"
    "acme.example.com</header_from></identifiers></record>"
)


def parse(document: str | bytes, *, max_records: int = 100, seconds: float = 60.0):
    raw = document.encode() if isinstance(document, str) else document
    return dmarc_parse(raw, max_records=max_records, deadline=time.monotonic() + seconds)


@pytest.mark.parametrize(
    ("document", "org_name"),
    [
        (f"<feedback>{METADATA}{POLICY}{RECORD}</feedback>", "Reporter"),
        (f"<feedback>{RECORD}{POLICY}{METADATA}</feedback>", "Reporter"),  # another order
        (
            f"<feedback><version>1.0</version><x-vendor a='1'>?</x-vendor>{METADATA}{POLICY}{RECORD}</feedback>",
            "Reporter",
        ),
        (
            f"<feedback>{METADATA.replace('>Reporter<', '><')}{POLICY}{RECORD}</feedback>",
            "reporter.example",
        ),  # empty org_name: the email's domain, as parsedmarc takes it
        (
            f"<feedback>{METADATA.replace('<org_name>Reporter</org_name>', '')}{POLICY}{RECORD}</feedback>",
            "reporter.example",
        ),
        (
            f"<feedback>{METADATA.replace('<org_name>Reporter</org_name><email>dmarc@reporter.example</email>', '')}"
            f"{POLICY}{RECORD}</feedback>",
            "",
        ),  # neither: still counted
        (f"<feedback xmlns='urn:ietf:params:xml:ns:dmarc-2.0'>{METADATA}{POLICY}{RECORD}</feedback>", "Reporter"),
        (
            f"<?xml version='1.0'?> <xs:schema xmlns:xs='http://www.w3.org/2001/XMLSchema'>\n<feedback>{METADATA}"
            f"{POLICY}{RECORD}</feedback>",
            "Reporter",
        ),  # an unclosed wrapper, as IKEA's
        (f"<feedback>{METADATA.replace('1795046400', '1795046400.0')}{POLICY}{RECORD}</feedback>", "Reporter"),
        (
            f"<feedback>{METADATA.replace('dmarc@reporter.example', '<dmarc@reporter.example>')}{POLICY}"
            f"{RECORD.replace('<header_from>acme', '<header_from>a<cme')}</feedback>",
            "Reporter",
        ),  # unescaped <
    ],
)
def test_what_a_lenient_reader_reads_is_read(document, org_name):
    report = parse(document)
    assert (report.org_name, report.report_id, report.domain) == (org_name, "r1", "acme.example.com")
    assert [(row.source_ip, row.count, row.dkim_aligned, row.spf_aligned) for row in report.rows] == [
        ("192.0.2.1", 3, True, False)
    ]


def test_bytes_that_are_not_utf_8_are_read_past():
    document = f"<feedback>{METADATA}{POLICY}{RECORD}</feedback>".encode().replace(b"Reporter", b"Rep\xff\xfeorter")
    assert parse(document).rows[0].count == 3


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("<html><body>hi</body></html>", "no <feedback> element"),
        ("", "not XML any reader can recover"),
        (f"<feedback>{METADATA.replace('<report_id>r1</report_id>', '')}{POLICY}</feedback>", "no <report_id>"),
        (f"<feedback>{METADATA}</feedback>", "no <domain>"),
        (f"<feedback>{POLICY}</feedback>", "no <begin>"),
        (
            f"<feedback>{METADATA}{POLICY}{RECORD.replace('<count>3</count>', '')}</feedback>",
            "DMARC record 1 has no <count>",
        ),
        ("<!DOCTYPE feedback [<!ENTITY e 'x'>]><feedback>&e;</feedback>", "DTDForbidden"),
        # The DTD after junk that makes the document not well-formed: refused on the recovering path too.
        ("\x01junk<!DOCTYPE feedback [<!ENTITY e 'x'>]><feedback>&e;</feedback>", ""),
    ],
)
def test_what_no_reader_can_count_is_refused_with_the_reason(document, reason):
    with pytest.raises(ReportRefused) as refused:
        parse(document)
    assert reason in str(refused.value)


@pytest.mark.parametrize("records", [5, 6])
def test_reading_stops_past_the_record_cap(records):
    document = f"<feedback>{METADATA}{POLICY}{RECORD * records}</feedback>"
    if records <= 5:
        assert len(parse(document, max_records=5).rows) == records
        return
    with pytest.raises(ReportRefused, match=r"over 5 records \(MAILSERVICE_REPORT_MAX_RECORDS\)"):
        parse(document, max_records=5)


def _fill(head: str, unit: str, tail: str) -> bytes:
    return (head + unit * ((REPORT_MAX_BYTES - len(head) - len(tail)) // len(unit)) + tail).encode()


HOSTILE = {
    "records past the cap": (_fill(f"<feedback>{METADATA}{POLICY}", RECORD, "</feedback>"), "over 20000 records"),
    "deep nesting": (_fill("<feedback>", "<a>", ""), "no <begin>"),
    "one huge text node": (_fill(f"<feedback>{METADATA}<x>", "y", f"</x>{POLICY}</feedback>"), "without a '>'"),
    "many attributes": (_fill("<feedback><a ", "b0='1' ", "/></feedback>"), "without a '>'"),
    "many short attributed tags": (_fill(f"<feedback>{METADATA}{POLICY}", "<a b='1' c='2' d='3'/>", ""), ""),
    "entity references": (
        _fill(f"<feedback>{METADATA}<x>", "&lt;&#65;&undefined;", f"</x>{POLICY}</feedback>"),
        "without a '>'",
    ),
    "unknown elements inside <feedback>": (_fill(f"<feedback>{METADATA}{POLICY}<x>", "<a><b/></a>", "</x>"), ""),
    "unknown elements outside <feedback>": (_fill(f"<w><feedback>{METADATA}{POLICY}</feedback>", "<a/>", "</w>"), ""),
    "a record of many elements": (_fill(f"<feedback>{METADATA}{POLICY}<record>", "<a/>", ""), "over 1000 elements"),
    "unclosed elements": (_fill(f"<feedback>{METADATA}{POLICY}", "<record><row>", ""), "no <source_ip>"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_documents_of_the_accepted_size_are_read_or_refused_within_the_budget(case):
    """Each within the parsing budget and one chunk past it. Parsing is linear, but Python handles each
    element's events: 20 MiB of 4-byte elements is 5 million of them, about 19 s on a quiet core,
    so those are refused at the budget (any case may be, on a busy machine), never read for longer."""
    document, reason = HOSTILE[case]
    assert len(document) <= REPORT_MAX_BYTES
    started = time.monotonic()
    try:
        parse(document, max_records=20_000, seconds=PARSE_SECONDS)
    except ReportRefused as refused:
        assert reason in str(refused) or "not read within" in str(refused), str(refused)
        assert reason or "not read within" in str(refused), f"refused ({refused}) where it should be read"
    else:
        assert not reason, f"read, where refused for {reason!r} was expected"
    assert time.monotonic() - started < PARSE_SECONDS + CHUNK_SECONDS


def test_reading_stops_at_the_deadline():
    document, _ = HOSTILE["records past the cap"]
    started = time.monotonic()
    with pytest.raises(ReportRefused, match=r"not read within 5 s \(MAILSERVICE_INBOUND_PARSE_SECONDS\)"):
        parse(document, seconds=0.2, max_records=10**6)
    assert time.monotonic() - started < 0.2 + CHUNK_SECONDS

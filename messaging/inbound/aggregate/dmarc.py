"""A DMARC aggregate report (RFC 7489 appendix C, or RFC 9990's schema) read into value objects.

Elements are found by local name, so the namespaced forms (Microsoft's `dmarc-xml/0.1`, RFC 9990's
`urn:ietf:params:xml:ns:dmarc-2.0`) and either element order read alike. The XML may carry no DTD
at all (defusedxml, forbid_dtd): no entity is expanded or fetched, whatever it declares.
"""

import ipaddress
from dataclasses import dataclass
from datetime import UTC, datetime
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from mailservice.mailbox import InvalidAddress, canonical_domain
from messaging.inbound.aggregate import ReportRefused

MAX_COUNT = 2**31 - 1  # messages per row: what the database column holds
MAX_RECORDS = 100_000  # rows per report; Google's largest run to a few thousand
_TEXT_LIMIT = 255  # characters kept of a reporter's free text (org_name, report_id, results)


@dataclass(frozen=True)
class DmarcRow:
    """One <record>: the messages from one source address with one set of results."""

    source_ip: str
    count: int
    disposition: str
    dkim_aligned: bool  # policy_evaluated/dkim = pass: a DKIM signature passed and aligned with the From domain
    spf_aligned: bool  # policy_evaluated/spf = pass
    header_from: str
    dkim_result: str  # the first auth_results/dkim result ('' when none was checked)
    spf_result: str


@dataclass(frozen=True)
class DmarcAggregate:
    org_name: str
    report_id: str
    begin: datetime
    end: datetime
    domain: str  # policy_published/domain, canonical A-label form
    policy: str
    rows: tuple[DmarcRow, ...]


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


def _child(element: Element, name: str) -> Element | None:
    return next((child for child in element if _local(child.tag) == name), None)


def _children(element: Element, name: str) -> list[Element]:
    return [child for child in element if _local(child.tag) == name]


def _text(element: Element | None, name: str, *, required: bool = False) -> str:
    found = _child(element, name) if element is not None else None
    text = (found.text or "").strip() if found is not None else ""
    if required and not text:
        raise ReportRefused(f"DMARC report has no <{name}>")
    return text[:_TEXT_LIMIT]


def _timestamp(element: Element | None, name: str) -> datetime:
    text = _text(element, name, required=True)
    try:
        return datetime.fromtimestamp(int(text), tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise ReportRefused(f"DMARC report's date_range/{name} is not a Unix time: {text[:40]!r}") from None


def _row(record: Element, index: int) -> DmarcRow:
    row = _child(record, "row")
    evaluated = _child(row, "policy_evaluated") if row is not None else None
    raw_ip = _text(row, "source_ip", required=True)
    try:
        source_ip = str(ipaddress.ip_address(raw_ip))
    except ValueError:
        raise ReportRefused(f"DMARC record {index}: source_ip {raw_ip[:60]!r} is not an IP address") from None
    raw_count = _text(row, "count", required=True)
    if not raw_count.isdigit() or int(raw_count) > MAX_COUNT:
        raise ReportRefused(f"DMARC record {index}: count {raw_count[:20]!r} is not a count of messages")
    auth = _child(record, "auth_results")
    dkim = _children(auth, "dkim") if auth is not None else []
    return DmarcRow(
        source_ip=source_ip,
        count=int(raw_count),
        disposition=_text(evaluated, "disposition").lower()[:16],
        dkim_aligned=_text(evaluated, "dkim").lower() == "pass",
        spf_aligned=_text(evaluated, "spf").lower() == "pass",
        header_from=_text(_child(record, "identifiers"), "header_from").lower(),
        dkim_result=_text(dkim[0], "result").lower()[:16] if dkim else "",
        spf_result=_text(_child(auth, "spf") if auth is not None else None, "result").lower()[:16],
    )


def dmarc_parse(document: bytes) -> DmarcAggregate:
    """The report in `document` (XML); ReportRefused with the reason when it is not one we can count."""
    try:
        feedback = fromstring(document, forbid_dtd=True)
    except DefusedXmlException as exc:
        raise ReportRefused(f"DMARC report refused: {type(exc).__name__} (no DTD or entity is allowed)") from None
    except (ParseError, ValueError) as exc:
        raise ReportRefused(f"DMARC report is not well-formed XML: {str(exc)[:120]}") from None
    if _local(feedback.tag) != "feedback":
        raise ReportRefused(f"not a DMARC aggregate report: root element <{_local(feedback.tag)[:40]}>")
    metadata = _child(feedback, "report_metadata")
    published = _child(feedback, "policy_published")
    date_range = _child(metadata, "date_range") if metadata is not None else None
    begin, end = _timestamp(date_range, "begin"), _timestamp(date_range, "end")
    if end < begin:
        raise ReportRefused("DMARC report's date range ends before it begins")
    raw_domain = _text(published, "domain", required=True)
    try:
        domain = canonical_domain(raw_domain)
    except InvalidAddress:
        raise ReportRefused(f"DMARC report's policy_published/domain {raw_domain[:80]!r} is not a domain") from None
    records = _children(feedback, "record")
    if len(records) > MAX_RECORDS:
        raise ReportRefused(f"DMARC report has {len(records)} records, over {MAX_RECORDS}")
    return DmarcAggregate(
        org_name=_text(metadata, "org_name", required=True),
        report_id=_text(metadata, "report_id", required=True),
        begin=begin,
        end=end,
        domain=domain,
        policy=_text(published, "p").lower()[:16],
        rows=tuple(_row(record, index) for index, record in enumerate(records, start=1)),
    )

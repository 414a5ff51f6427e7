"""A DMARC aggregate report (RFC 7489 appendix C, or RFC 9990's schema) read into value objects, the
way a lenient, safe reader (parsedmarc) reads real reporters' files.

Elements are found by local name, so the namespaced forms (Microsoft's `dmarc-xml/0.1`, RFC 9990's
`urn:ietf:params:xml:ns:dmarc-2.0`) and any element order read alike; unknown elements are skipped;
an empty or missing `org_name` is the reporter's `email` domain. XML errors are read past by
libxml2's recovering parser, as parsedmarc does, and a `<feedback>` wrapped in a stray `xs:schema`
element is found. What is refused is what no such reader can count: no `<feedback>`, no
`report_id`, no date range or policy domain, a record without a source address or count.

Why lxml's recovering parser rather than defusedxml: it reads the XML errors real reporters make
(an unescaped `<` in a value, bytes that are not UTF-8, an unclosed wrapper), which expat refuses,
and it is safe configured as below: entities are never substituted (resolve_entities=False), no DTD
is loaded and nothing fetched (load_dtd, no_network), text nodes and depth stay within libxml2's
default limits (huge_tree=False). A document declaring a DTD is refused all the same: no report
needs one. Measured on this machine: billion laughs, a 400 KB quadratic-blowup entity and an
external entity each parse in under a millisecond to a tree of under 100 bytes (a DTD is then
refused); a 50,000-record report (19 MB) parses in 0.4 s where defusedxml took 2.6 s, and a
20,000-record one (the default cap) is read into checked rows here in 1.5 s on 2 busy cores.
It is read as a stream, 64 KiB at a time: each record is dropped once read, so memory does not grow
with the records; reading stops at the first record over the cap (MAILSERVICE_REPORT_MAX_RECORDS)
or past the deadline (MAILSERVICE_INBOUND_PARSE_SECONDS).
"""

import ipaddress
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.conf import settings
from lxml import etree

from mailservice.mailbox import InvalidAddress, canonical_domain
from messaging.inbound.aggregate import ReportRefused

MAX_COUNT = 2**31 - 1  # messages per row: what the database column holds
_TEXT_LIMIT = 255  # characters kept of a reporter's free text (org_name, report_id, results)
REPORT = "DMARC report"  # what a required element is missing from, unless a record
_CHUNK = 64 * 1024  # bytes fed to the parser between two looks at the deadline
_READ_WHOLE = {"record", "report_metadata", "policy_published"}  # the children of <feedback> counts come from
_ELEMENT_LIMIT = 1000  # elements in one of those: a record has about 20
_RUN_LIMIT = 64 * 1024  # a report's tags and values are short: real reports have a '>' every 100 bytes or so


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
    org_name: str  # as the reporter names itself, else its email's domain
    email_domain: str  # report_metadata/email's domain, canonical; '' when missing or not a domain
    report_id: str
    begin: datetime
    end: datetime
    domain: str  # policy_published/domain, canonical A-label form
    policy: str
    rows: tuple[DmarcRow, ...]


def _local(element: etree._Element) -> str:
    tag = element.tag
    return tag.rpartition("}")[2] if isinstance(tag, str) else ""


def _child(element: etree._Element | None, name: str) -> etree._Element | None:
    """The first child named `name` in any namespace, or none (lxml's find: a third of a report's reading time
    went to a loop over the children here)."""
    return None if element is None else element.find(f"{{*}}{name}")


def _text(element: etree._Element | None, name: str, *, required: str = "") -> str:
    """The text of `element`'s child `name`; `required` names what must have it (ReportRefused if not)."""
    found = _child(element, name)
    text = (found.text or "").replace("\x00", "").strip() if found is not None else ""
    if required and not text:
        raise ReportRefused(f"{required} has no <{name}>")
    return text[:_TEXT_LIMIT]


def _timestamp(element: etree._Element | None, name: str) -> datetime:
    text = _text(element, name, required=REPORT)
    try:
        # Some reporters write a fraction ("1538413632.0"); parsedmarc reads the whole seconds too.
        return datetime.fromtimestamp(int(text.partition(".")[0]), tz=UTC)
    except (ValueError, OverflowError, OSError):
        raise ReportRefused(f"DMARC report's date_range/{name} is not a Unix time: {text[:40]!r}") from None


def _email_domain(email: str) -> str:
    try:
        return canonical_domain(email.rpartition("@")[2].strip(" <>"), trailing_dot=True) if "@" in email else ""
    except InvalidAddress:
        return ""


def _row(record: etree._Element, index: int) -> DmarcRow:
    row = _child(record, "row")
    evaluated = _child(row, "policy_evaluated")
    where = f"DMARC record {index}"
    raw_ip = _text(row, "source_ip", required=where)
    try:
        source_ip = str(ipaddress.ip_address(raw_ip))
    except ValueError:
        raise ReportRefused(f"DMARC record {index}: source_ip {raw_ip[:60]!r} is not an IP address") from None
    raw_count = _text(row, "count", required=where)
    if not raw_count.isdigit() or int(raw_count) > MAX_COUNT:
        raise ReportRefused(f"DMARC record {index}: count {raw_count[:20]!r} is not a count of messages")
    auth = _child(record, "auth_results")
    return DmarcRow(
        source_ip=source_ip,
        count=int(raw_count),
        disposition=_text(evaluated, "disposition").lower()[:16],
        dkim_aligned=_text(evaluated, "dkim").lower() == "pass",
        spf_aligned=_text(evaluated, "spf").lower() == "pass",
        header_from=_text(_child(record, "identifiers"), "header_from").lower(),
        dkim_result=_text(_child(auth, "dkim"), "result").lower()[:16],
        spf_result=_text(_child(auth, "spf"), "result").lower()[:16],
    )


def _events(document: bytes, deadline: float) -> Iterator[tuple[str, etree._Element]]:
    """The parser's events, fed a chunk at a time so that the deadline is checked between chunks:
    libxml2 is linear but not fast on some shapes (20 MiB of attributes on one element took 4.8 s).
    libxml2 parses a tag only once its '>' has come, so a run without one is refused past _RUN_LIMIT:
    each feed then costs at most a chunk and a run, and the deadline holds."""
    parser = etree.XMLPullParser(
        events=("start", "end"),
        recover=True,
        resolve_entities=False,
        load_dtd=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    run = 0  # bytes since the last '>'
    for offset in range(0, len(document), _CHUNK):
        if time.monotonic() > deadline:
            raise ReportRefused(
                f"DMARC report not read within {settings.MAILSERVICE_INBOUND_PARSE_SECONDS:g} s"
                " (MAILSERVICE_INBOUND_PARSE_SECONDS)"
            )
        chunk = document[offset : offset + _CHUNK]
        last = chunk.rfind(b">")
        run = run + len(chunk) if last < 0 else len(chunk) - last - 1
        if run > _RUN_LIMIT:
            raise ReportRefused(f"DMARC report has a tag or text of over {_RUN_LIMIT} bytes without a '>'")
        parser.feed(chunk)
        yield from parser.read_events()
    parser.close()
    yield from parser.read_events()


@dataclass
class _Reading:
    """What the stream has yielded so far: the <feedback> element, its metadata and policy (kept in the
    tree), its records read, and the child of <feedback> being read (`top`, kept whole when `kept`)."""

    feedback: etree._Element | None = None
    metadata: etree._Element | None = None
    published: etree._Element | None = None
    rows: list[DmarcRow] = field(default_factory=list)
    top: etree._Element | None = None
    kept: bool = False
    inside: int = 0  # elements started inside `top`

    def keeps(self, element: etree._Element) -> bool:
        """Whether `element` is in a part still to be read: the metadata, the policy or the open record.
        By its ancestors, not by the order of events: recovery may close an element late."""
        for ancestor in element.iterancestors():
            if ancestor is self.feedback:
                return False
            if ancestor is self.metadata or ancestor is self.published or (self.kept and ancestor is self.top):
                return True
        return False


def _dropped(reading: _Reading, element: etree._Element) -> None:
    """Free a read element and the siblings before it (but the metadata and policy), so that the tree
    holds about one path at a time."""
    element.clear()
    parent = element.getparent()
    skipped = 0
    while parent is not None and skipped < 3:
        first = parent[skipped]
        if first is element:
            return
        if first is reading.metadata or first is reading.published:
            skipped += 1
        else:
            del parent[skipped]


def _started(reading: _Reading, element: etree._Element) -> None:
    parent = element.getparent()
    if parent is None and element.getroottree().docinfo.internalDTD is not None:
        raise ReportRefused("DMARC report declares a DTD (DTDForbidden): no DTD or entity is allowed")
    if reading.feedback is None:
        # The root, or the root's child under a stray wrapper (an unclosed <xs:schema>, seen from IKEA).
        if (parent is None or parent.getparent() is None) and _local(element) == "feedback":
            reading.feedback = element
    elif parent is reading.feedback:
        name = _local(element)
        reading.top, reading.kept, reading.inside = element, name in _READ_WHOLE, 0
        if name == "report_metadata" and reading.metadata is None:
            reading.metadata = element
        elif name == "policy_published" and reading.published is None:
            reading.published = element
    elif reading.top is not None and reading.kept:
        reading.inside += 1
        if reading.inside > _ELEMENT_LIMIT:
            raise ReportRefused(f"DMARC report's <{_local(reading.top)}> holds over {_ELEMENT_LIMIT} elements")


def _read(document: bytes, max_records: int, deadline: float) -> _Reading:
    reading = _Reading()
    for event, element in _events(document, deadline):
        if event == "start":
            _started(reading, element)
        elif element is reading.metadata or element is reading.published or element is reading.feedback:
            if element is reading.top:
                reading.top = None
            # Read once the whole document is.
        elif reading.feedback is not None and element.getparent() is reading.feedback:
            if _local(element) == "record":
                if len(reading.rows) >= max_records:
                    raise ReportRefused(
                        f"DMARC report has over {max_records} records (MAILSERVICE_REPORT_MAX_RECORDS);"
                        " not read further"
                    )
                reading.rows.append(_row(element, len(reading.rows) + 1))
            reading.top = None
            _dropped(reading, element)
        elif not (reading.kept and reading.top is not None) and not reading.keeps(element):
            # Outside <feedback>, or inside an element no count is read from. (While a record, the
            # metadata or the policy is open, what ends is kept: at most _ELEMENT_LIMIT of them.)
            _dropped(reading, element)
    return reading


def dmarc_parse(document: bytes, *, max_records: int, deadline: float) -> DmarcAggregate:
    """The report in `document` (XML), read by `deadline` (time.monotonic()); ReportRefused with the
    reason when it is not one we can count."""
    try:
        reading = _read(document, max_records, deadline)
    except etree.XMLSyntaxError as exc:  # nothing recoverable: no element at all
        raise ReportRefused(f"DMARC report is not XML any reader can recover: {str(exc)[:120]}") from None
    if reading.feedback is None:
        raise ReportRefused("not a DMARC aggregate report: no <feedback> element")
    metadata, published = reading.metadata, reading.published
    date_range = _child(metadata, "date_range")
    begin, end = _timestamp(date_range, "begin"), _timestamp(date_range, "end")
    if end < begin:
        raise ReportRefused("DMARC report's date range ends before it begins")
    raw_domain = _text(published, "domain", required=REPORT)
    try:
        domain = canonical_domain(raw_domain, trailing_dot=True)
    except InvalidAddress:
        raise ReportRefused(f"DMARC report's policy_published/domain {raw_domain[:80]!r} is not a domain") from None
    email_domain = _email_domain(_text(metadata, "email"))
    return DmarcAggregate(
        org_name=_text(metadata, "org_name") or email_domain,
        email_domain=email_domain,
        report_id=_text(metadata, "report_id", required=REPORT),
        begin=begin,
        end=end,
        domain=domain,
        policy=_text(published, "p").lower()[:16],
        rows=tuple(reading.rows),
    )

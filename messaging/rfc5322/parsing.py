"""Decode a message as it arrived on the wire into the fields we store, whatever its state.

Real mail is often broken: undeclared 8-bit headers, unknown or wrong charsets, truncated MIME.
Nothing here raises on bad input; each step falls back to a lossy but readable decoding, and the
raw bytes are stored next to the result for whoever needs the exact source.
"""

import codecs
import email
import email.policy
import re
import time
from dataclasses import dataclass
from email.feedparser import FeedParser
from email.header import Header, decode_header
from email.message import Message as EmailMessage
from email.utils import getaddresses

from lxml import etree

_FALLBACK_CHARSETS = ("utf-8", "cp1252")
_HORIZONTAL_SPACE = re.compile(r"[ \t\r\f\v\xa0]+")
_BLANK_LINES = re.compile(r"\n{3,}")
_FOLD = re.compile(r"\r?\n[ \t]+")


_FEED_CHUNK = 256 * 1024  # characters fed to the parser between two looks at the clock
# Codecs Python offers that no mail charset names: they decode backslash escapes into any code
# point (NUL, lone surrogates), so a part declaring one is read with the fallbacks instead.
_NOT_MAIL_CHARSETS = {"unicode_escape", "raw_unicode_escape", "unicode_internal", "escape_codec", "punycode"}
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class ParseBudgetExceeded(Exception):
    """Parsing took longer than the per-message budget."""


class UnparsableMessage(Exception):
    """Content no parser can read, whatever the time: e.g. MIME nested thousands deep."""


def parse_bytes(raw: bytes, *, deadline: float | None = None) -> EmailMessage:
    """The compat32 parser never raises on malformed input; it records defects instead.

    With a `deadline` (time.monotonic()), the bytes are fed in chunks and ParseBudgetExceeded is
    raised once it has passed. MIME nested deeper than Python's recursion limit cannot be parsed
    at all: UnparsableMessage.
    """
    parser = FeedParser(policy=email.policy.compat32)
    text = raw.decode("ascii", errors="surrogateescape")  # what email.message_from_bytes does
    try:
        for start in range(0, len(text), _FEED_CHUNK):
            parser.feed(text[start : start + _FEED_CHUNK])
            if deadline is not None and time.monotonic() > deadline:
                raise ParseBudgetExceeded
        return parser.close()
    except RecursionError:
        raise UnparsableMessage("MIME structure nested too deep to parse") from None


def decode_bytes(data: bytes, charset: str | None = None) -> str:
    """The declared charset if it exists and fits, else UTF-8, else Windows-1252 (which never fails)."""
    candidates = [charset] if charset else []
    for candidate in [*candidates, *_FALLBACK_CHARSETS]:
        try:
            if codecs.lookup(candidate).name.replace("-", "_") in _NOT_MAIL_CHARSETS:
                continue
            return data.decode(candidate)
        except (LookupError, UnicodeDecodeError):
            continue
    return data.decode("cp1252", errors="replace")


def _raw_header_text(value: str) -> str:
    """compat32 keeps undeclared 8-bit header bytes as surrogate escapes; decode them for real."""
    try:
        return decode_bytes(value.encode("ascii", errors="surrogateescape"))
    except UnicodeEncodeError:
        return value.encode("utf-8", errors="replace").decode("utf-8")


def storable(text: str) -> str:
    """PostgreSQL text cannot hold NUL characters, nor UTF-8 lone surrogates (e.g. from a utf-7 part)."""
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", ""))


def decode_header_value(value: str | Header | None) -> str:
    """An unfolded header as text: RFC 2047 encoded words decoded, 8-bit bytes guessed."""
    if value is None:
        return ""
    if isinstance(value, Header):
        # compat32 wraps undeclared 8-bit header bytes in a Header with the `unknown-8bit` charset.
        chunks = decode_header(value)
        text = "".join(chunk if isinstance(chunk, str) else decode_bytes(chunk, charset) for chunk, charset in chunks)
    else:
        text = _raw_header_text(value)
    text = _FOLD.sub(" ", text)
    if "=?" not in text:
        return text.strip()
    try:
        chunks = decode_header(text)
    except Exception:  # noqa: BLE001 - a malformed encoded word: keep the header as it came
        return text.strip()
    parts = [chunk if isinstance(chunk, str) else decode_bytes(chunk, charset) for chunk, charset in chunks]
    return "".join(parts).strip()


def subparts(part: EmailMessage) -> list[EmailMessage]:
    """The messages a message/* part was parsed into (header blocks of a report, an attached message)."""
    payload = part.get_payload()
    return [item for item in payload if isinstance(item, EmailMessage)] if isinstance(payload, list) else []


def header(message: EmailMessage, name: str) -> str:
    return decode_header_value(message.get(name))


def addresses(message: EmailMessage, *names: str) -> list[str]:
    """Lower-case bare addresses found in the given headers."""
    found = []
    for name in names:
        values = [decode_header_value(value) for value in message.get_all(name, [])]
        for _, address in getaddresses(values):
            if "@" in address:
                found.append(address.strip().lower())
    return found


def part_text(part: EmailMessage) -> str | None:
    """A non-multipart part's content as text, transfer encoding and charset undone as far as possible."""
    if part.is_multipart():
        return None
    payload = part.get_payload(decode=True)
    if not isinstance(payload, bytes):  # None: a message/* part, already parsed into messages
        inner = part.get_payload()
        if isinstance(inner, list):
            return "\n\n".join(str(item) for item in inner)
        return str(inner) if inner else None
    return decode_bytes(payload, part.get_content_charset())


_SKIPPED = {"script", "style", "head", "title", "template"}
_BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "blockquote"}


def html_to_text(html: str) -> str:
    """The text of an HTML body, a line break around each block.

    libxml2 (through lxml) parses in linear time and stops nesting at 256 levels, so hostile markup
    (`"<a\\n" * N`, thousands of unclosed tags) costs milliseconds; the stdlib's html.parser was
    quadratic on such input.
    """
    parser = etree.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True, no_network=True)
    try:
        root = etree.fromstring(html.encode("utf-8", "replace"), parser)
    except (etree.LxmlError, ValueError):
        return ""
    if root is None:
        return ""
    chunks: list[str] = []
    skipping = 0
    for event, element in etree.iterwalk(root, events=("start", "end")):
        tag = element.tag if isinstance(element.tag, str) else ""
        if event == "start":
            skipping += tag in _SKIPPED
            chunks.append("\n" if tag in _BLOCKS else "")
            if not skipping and element.text:
                chunks.append(element.text)
        else:
            skipping -= tag in _SKIPPED
            chunks.append("\n" if tag in _BLOCKS and tag != "br" else "")  # <br> is one break, not two
            if not skipping and element.tail:
                chunks.append(element.tail)
    lines = (_HORIZONTAL_SPACE.sub(" ", line).strip() for line in "".join(chunks).split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def _inline_parts(message: EmailMessage, content_type: str) -> list[EmailMessage]:
    return [
        part
        for part in message.walk()
        if part.get_content_type() == content_type and part.get_content_disposition() != "attachment"
    ]


def body_text(message: EmailMessage) -> str | None:
    """The first text/plain part, else the first HTML part as text, else None."""
    for part in _inline_parts(message, "text/plain"):
        text = part_text(part)
        if text is not None:
            return text
    for part in _inline_parts(message, "text/html"):
        html = part_text(part)
        if html is not None:
            return html_to_text(html)
    return None


@dataclass(frozen=True)
class ReceivedMail:
    from_address: str
    subject: str
    text: str | None
    message_id: str


def parse_received(raw: bytes) -> ReceivedMail:
    return received_fields(parse_bytes(raw))


def received_fields(message: EmailMessage) -> ReceivedMail:
    text = body_text(message)
    return ReceivedMail(
        from_address=storable(header(message, "From")),
        subject=storable(header(message, "Subject")),
        text=storable(text) if text is not None else None,
        message_id=storable(header(message, "Message-ID")),
    )


# A message may have any number of parts; past this many, the rest are not listed as attachments.
MAX_ATTACHMENTS = 100


def attachment_parts(message: EmailMessage) -> list[EmailMessage]:
    """The parts an application would call attachments, in order: those that are not an inline
    text or HTML body (a disposition of `attachment`, or a file name, or any other leaf type)."""
    found: list[EmailMessage] = []
    for part in message.walk():
        if part.is_multipart():
            continue
        inline_body = part.get_content_type() in ("text/plain", "text/html") and not part.get_filename()
        if part.get_content_disposition() == "attachment" or not inline_body:
            found.append(part)
            if len(found) == MAX_ATTACHMENTS:
                break
    return found


def part_bytes(part: EmailMessage) -> bytes:
    """A leaf part's content, transfer encoding undone (base64 and quoted-printable decode leniently)."""
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else b""

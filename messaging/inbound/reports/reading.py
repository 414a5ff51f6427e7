"""Bounded reading of a report: its lines, its `Name: value` blocks, its parts, the original it returns.

Every heuristic reads what these return: at most NOTICE_LIMIT characters, lines cut at LINE_LIMIT,
header values cut at HEADER_LIMIT, so the cost of any pattern is linear in the input.
"""

import re
from collections.abc import Iterator
from dataclasses import dataclass
from email.message import Message as EmailMessage

from messaging.rfc5322.parsing import (
    body_text,
    decode_bytes,
    decode_header_value,
    header,
    parse_bytes,
    part_text,
    subparts,
)

NOTICE_LIMIT = 64 * 1024  # characters of a notice the plain-text heuristics read
LINE_LIMIT = 1000  # RFC 5322's line length: longer lines are cut before any pattern sees them
HEADER_LIMIT = 4096  # characters of one header value the heuristics read
CHALLENGE_LIMIT = 4096  # characters of a notice searched for a challenge-response request's wording

_MESSAGE_ID_LINE = re.compile(r"^[ \t>]*message-id:[ \t]*(<[^<>\s]{1,250}>)", re.IGNORECASE)
# Where a plain-text bounce starts quoting the original message: addresses below are not failures.
_ORIGINAL_COPY = re.compile(
    # "------ This is a copy of the message ------", "--- The header of the original message ---"
    r"^[ \t]*-{2,}[^\n]{0,40}?(copy|original|below this line|undelivered message|returned message|headers? follow)"
    r"|^[ \t]*(original message follows|below this line is a copy|message headers follow|unsent message below"
    r"|here is a copy|the headers of the original|content-type: message/rfc822|received: from|return-path:)",
    re.IGNORECASE,
)
_HEADER_LINE = re.compile(r"^[A-Za-z0-9-]{1,76}:")

Fields = dict[str, list[str]]  # a `Name: value` block, names lower-cased, every value kept


def lines(text: str) -> Iterator[str]:
    """The first NOTICE_LIMIT characters of `text`, line by line, each cut at LINE_LIMIT."""
    for line in text[:NOTICE_LIMIT].splitlines():
        yield line[:LINE_LIMIT]


def field_blocks(text: str) -> list[Fields]:
    """`Name: value` blocks separated by blank lines (RFC 3464 and RFC 5965 report bodies)."""
    blocks: list[Fields] = []
    current: Fields = {}
    name = ""
    for line in lines(text):
        if not line.strip():
            if current:
                blocks.append(current)
            current, name = {}, ""
        elif line[0] in " \t" and name:
            current[name][-1] += " " + line.strip()
        elif ":" in line:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            current.setdefault(name, []).append(value.strip())
    if current:
        blocks.append(current)
    return blocks


def report_blocks(part: EmailMessage) -> list[Fields]:
    """The parser pre-splits message/* parts into header blocks; a mislabelled part is plain text."""
    payload = part.get_payload()
    if not isinstance(payload, list):
        return field_blocks(part_text(part) or "")
    blocks: list[Fields] = []
    for block in payload:
        if isinstance(block, EmailMessage):
            blocks += _header_block(block)
    return [block for block in blocks if block]


def _header_block(block: EmailMessage) -> list[Fields]:
    """A pre-split block's header fields, then the blocks of any text the parser left in its body."""
    fields: Fields = {}
    for name, value in block.items():
        fields.setdefault(name.lower(), []).append(decode_header_value(value)[:HEADER_LIMIT])
    # The bytes, not get_payload(): that would replace undeclared 8-bit (RFC 6533 UTF-8) with U+FFFD.
    trailing = None if block.is_multipart() else block.get_payload(decode=True)
    return [fields, *field_blocks(decode_bytes(trailing))] if isinstance(trailing, bytes) else [fields]


def first(block: Fields, name: str) -> str:
    values = block.get(name)
    return values[0] if values else ""


def first_part(message: EmailMessage, *content_types: str) -> EmailMessage | None:
    return next((part for part in message.walk() if part.get_content_type() in content_types), None)


def embedded_message(message: EmailMessage) -> EmailMessage | None:
    """The message a report returns, when it is attached whole."""
    original = first_part(message, "message/rfc822", "message/global")
    embedded = subparts(original) if original is not None else []
    return embedded[0] if embedded else None


def original_message_id(message: EmailMessage) -> str:
    """The Message-ID of the original as quoted in the report: an attached message, its headers, or text."""
    texts = []
    for part in message.walk():
        quoted = _quoted_header(part)
        if quoted is not None:
            found = header(quoted, "Message-ID")
            if found:
                return _normalise_message_id(found)
        elif part is not message or not part.is_multipart():
            text = part_text(part)
            if text:
                texts.append(text)
    return _quoted_message_id(texts)


def quoted_headers(message: EmailMessage) -> Iterator[EmailMessage]:
    """The headers of the original each part quotes whole (an attached message, or a headers part as a
    headers-only ARF carries them), in order."""
    for part in message.walk():
        quoted = _quoted_header(part)
        if quoted is not None:
            yield quoted


def _quoted_header(part: EmailMessage) -> EmailMessage | None:
    """The header of the original a part carries whole: an attached message, or a headers part."""
    content_type = part.get_content_type()
    if content_type in {"message/rfc822", "message/global"}:
        embedded = subparts(part)
        return embedded[0] if embedded else None
    if content_type in {"text/rfc822-headers", "message/global-headers"}:
        return parse_bytes((part_text(part) or "")[:NOTICE_LIMIT].encode("utf-8", "replace"))
    return None


def _quoted_message_id(texts: list[str]) -> str:
    """The first `Message-ID:` line of the texts (a notice quoting the original's header)."""
    for text in texts:
        for line in lines(text):
            match = _MESSAGE_ID_LINE.match(line)
            if match:
                return match.group(1)
    return ""


def _normalise_message_id(value: str) -> str:
    value = value.strip()[:HEADER_LIMIT]
    if not value:
        return ""
    return value if value.startswith("<") else f"<{value.strip('<>')}>"


def readable_text(message: EmailMessage) -> str:
    """The message's text part; for a multipart whose boundary never comes (so it has no parts), its body."""
    text = body_text(message)
    if text is None and isinstance(message.get_payload(), str):
        text = part_text(message)
    return text or ""


@dataclass(frozen=True)
class Text:
    """A message's readable text, split where a plain-text bounce starts quoting the original."""

    notice: str  # the human-readable notice
    quoted: str  # what follows the marker: the returned message, or its header


def split_text(message: EmailMessage) -> Text:
    text_lines = list(lines(readable_text(message)))
    cut = next((n for n, line in enumerate(text_lines) if n and _ORIGINAL_COPY.match(line)), len(text_lines))
    # The marker line is part of the quote when it is its first header ("Received: from ...").
    start = cut if cut < len(text_lines) and _HEADER_LINE.match(text_lines[cut]) else cut + 1
    return Text("\n".join(text_lines[:cut]), "\n".join(text_lines[start:]).lstrip("\n"))

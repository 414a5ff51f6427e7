"""A message submitted over SMTP, as dispatch sends it: the stored bytes with CRLF line endings, no Bcc
field, and a Message-ID and a Date added when it has none; the body is untouched.

The header-block reader is here too, because dispatch needs it as much as the submission server's
parser does (submitted_headers.py, beside it, imports it).
It never backtracks: the block is found within MAX_HEADER_BYTES and split into fields in one pass.
"""

import re
from datetime import datetime
from email.utils import format_datetime

from mailservice.errors import ErrorCode, ValidationFailed
from messaging.models import Message
from messaging.rfc5322.rendering import RenderedMessage, needs_smtputf8, parsed_address, single_line

MAX_HEADER_BYTES = 256 * 1024
MAX_HEADER_FIELDS = 500

_FIELD_NAME = re.compile(rb"[\x21-\x39\x3b-\x7e]+")  # RFC 5322 2.2: printable ASCII but colon
_HEADER_END = re.compile(rb"\r?\n\r?\n")
_LINE_END = re.compile(rb"\r?\n")
BARE_LINE_BREAK = re.compile(rb"\r(?!\n)|(?<!\r)\n")


class SubmissionMalformed(ValidationFailed):
    """The submitted message cannot be read; answered with a 5xx naming what is wrong."""

    code = ErrorCode.VALIDATION_ERROR


def split_head(raw: bytes) -> tuple[bytes, bytes]:
    """(header block, separator and body); a message without a blank line is all header."""
    found = _HEADER_END.search(raw, 0, MAX_HEADER_BYTES + 4)
    if found is None:
        if len(raw) > MAX_HEADER_BYTES:
            raise SubmissionMalformed(f"the header block is longer than {MAX_HEADER_BYTES} bytes")
        return raw.removesuffix(b"\n").removesuffix(b"\r"), b""
    return raw[: found.start()], raw[found.start() :]


def raw_fields(head: bytes) -> list[tuple[bytes, list[bytes]]]:
    """[(name, its lines as they are, without line endings)] in order; refuses what is not a field."""
    fields: list[tuple[bytes, list[bytes]]] = []
    for number, line in enumerate(_LINE_END.split(head), start=1):
        if line[:1] in (b" ", b"\t"):
            if not fields:
                raise SubmissionMalformed("the first header line is a continuation line")
            fields[-1][1].append(line)
            continue
        name, colon, _ = line.partition(b":")
        if not colon or not _FIELD_NAME.fullmatch(name):
            shown = line[:40].decode("ascii", "replace")
            raise SubmissionMalformed(f"header line {number} is not a header field: {single_line(shown)!r}")
        fields.append((name, [line]))
        if len(fields) > MAX_HEADER_FIELDS:
            raise SubmissionMalformed(f"more than {MAX_HEADER_FIELDS} header fields")
    return fields


def submitted_wire(raw: bytes, *, message_id: str, date: datetime, feedback_id: str = "") -> bytes:
    """The stored submission as it goes out: CRLF line endings (a bare CR or LF, refused since, in a
    message stored before, becomes CRLF so no relay sees one), no Bcc field, and a Message-ID, a Date
    and the service's Feedback-ID (messaging/feedback_id.py; any the submitter wrote is replaced: the
    feedback loop's identifiers are the service's) added at the end of the header block. The body is
    untouched."""
    head, rest = split_head(raw)
    kept: list[bytes] = []
    present: set[bytes] = set()
    for name, lines in raw_fields(head):
        lowered = name.lower()
        present.add(lowered)
        replaced = lowered == b"feedback-id" and bool(feedback_id)
        if lowered != b"bcc" and not replaced:
            kept += lines
    if b"message-id" not in present:
        kept.append(f"Message-ID: {message_id}".encode())
    if b"date" not in present:
        kept.append(f"Date: {format_datetime(date)}".encode())
    if feedback_id:
        kept.append(f"Feedback-ID: {feedback_id}".encode())
    return BARE_LINE_BREAK.sub(b"\r\n", b"\r\n".join(kept) + (rest or b"\r\n\r\n"))


def submitted_rendering(message: Message) -> RenderedMessage:
    """A stored submission ready to DKIM-sign: submitted_wire with the Message-ID and Date it was stored with."""
    data = submitted_wire(
        bytes(message.raw or b""),
        message_id=message.message_id_header,
        date=message.created_at,
        feedback_id=message.feedback_id,
    )
    return RenderedMessage(
        data=data,
        message_id=message.message_id_header,
        sender_domain=parsed_address(message.from_address).domain,
        smtputf8=needs_smtputf8(message),
    )

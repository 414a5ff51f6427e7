"""RFC 5322 / MIME rendering of an outbound message, written out directly.

Not with the standard library's `email` package: it parses back every header value it is given
and cost about 1.7 ms per message, the largest share of a dispatch worker's CPU next to the SMTP
conversation (bench/results/before-after-dispatch.md). What an outbound message needs of RFC 5322,
2045-2047 and 6532 is small, and writing it directly keeps header injection impossible by construction:
- any text that reaches a header goes through `single_line` first (control characters, line and
  paragraph separators become spaces), and is then written as ASCII atoms, an ASCII quoted-string
  with backslash and double quote escaped, or RFC 2047 base64 encoded-words (anything else,
  and any text holding encoded-word syntax `=?`, so that it reads back literally);
- an address is written from its parsed pair (`mailservice.mailbox.Address`): a dot-atom or
  quoted-string local part and an IDNA 2008 host name or address literal, or the message is unsendable;
- the only line breaks in the header block are the folds written here (CRLF and a space), and the
  block is checked at the end: a message whose headers are not exactly the ones set is unsendable.
Bcc never becomes a header. Bodies are UTF-8, 7bit when they are short-lined ASCII, else
quoted-printable or base64, whichever is shorter (as the `email` package chooses).
"""

import base64
import binascii
import functools
import re
import secrets
import unicodedata
from dataclasses import dataclass
from email.utils import format_datetime

from mailservice.mailbox import Address, InvalidAddress, parse_address, split_mailbox
from messaging.models import Message

MAX_LINE = 78  # RFC 5322 2.1.1: lines SHOULD be at most 78 characters, excluding the CRLF

_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_PHRASE = re.compile(rf"[{_ATEXT}]+(?: [{_ATEXT}]+)*")
_BODY_CONTROL = re.compile(rb"[\x00-\x08\x0b-\x1f\x7f]")


class UnsendableMessage(Exception):
    """The stored message cannot be expressed on the wire (it is failed, not retried)."""


@dataclass(frozen=True)
class RenderedMessage:
    data: bytes
    message_id: str
    sender_domain: str
    smtputf8: bool


def single_line(value: str) -> str:
    """`value` with every control, line- or paragraph-separator character turned into a space."""
    return "".join(" " if unicodedata.category(char) in {"Cc", "Zl", "Zp"} else char for char in value)


def _encoded_words(text: str) -> str:
    """`text` as RFC 2047 base64 encoded-words in UTF-8, one per folded line, none splitting a character."""
    words, chunk = [], ""
    for char in text:
        if chunk and len((chunk + char).encode()) > 39:  # 52 base64 characters: lines stay under 78
            words.append(chunk)
            chunk = ""
        chunk += char
    words.append(chunk)
    return "\r\n ".join(f"=?utf-8?b?{base64.b64encode(word.encode()).decode()}?=" for word in words)


def _fold(name: str, tokens: list[str]) -> str:
    """`Name: token token ...` with a fold (CRLF, space) before any token that would pass MAX_LINE.

    Unfolding (RFC 5322 2.2.3) removes only the CRLF, so the value reads back with one space
    between tokens wherever the fold fell."""
    line = f"{name}:"
    for token in tokens:
        current = len(line) - (line.rfind("\r\n") + 2 if "\r\n" in line else 0)
        first_line_of_token = token.split("\r\n", 1)[0]
        if current + 1 + len(first_line_of_token) > MAX_LINE and current > len(name) + 1:
            line += "\r\n"
        line += " " + token
    return line


def _check_header_block(data: bytes, names: list[str]) -> None:
    """Refuse a rendering whose header lines are not exactly `names`, each a whole CRLF-ended line."""
    head = data.split(b"\r\n\r\n", 1)[0]
    lines = head.split(b"\r\n")
    found = [line.split(b":", 1)[0].decode("ascii", "replace") for line in lines if line[:1] not in (b" ", b"\t")]
    stray = any(b"\r" in line or b"\n" in line or b"\0" in line for line in lines)
    if stray or sorted(found) != sorted(names):
        raise UnsendableMessage("the message's headers could not be written safely")


def parsed_address(mailbox: str) -> Address:
    """The parsed address of a stored Mailbox; a message whose address cannot be sent faithfully
    is unsendable (the API refuses those, so only rows stored before it did get here)."""
    if len(mailbox) <= _CACHED_MAILBOX_LENGTH:
        return _parsed_address_cached(mailbox)
    return _parsed_address(mailbox)


# Dispatch asks for each address of a message four or five times (the suppression check, the
# relay holds, the headers, SMTPUTF8, the envelope): parsing was 6.7% of a worker's Python in the
# dispatch benchmark. The cache holds more addresses than a batch can have (50 messages of 50
# recipients), so in real traffic too each address is parsed once per message. It keeps mailboxes
# of ordinary length only (an address is at most 254 octets; the rest is a display name), so it
# never holds more than about 10 MiB; an unparsable one is never cached.
_CACHED_MAILBOX_LENGTH = 512


def _parsed_address(mailbox: str) -> Address:
    try:
        address = parse_address(mailbox)
    except InvalidAddress as exc:
        raise UnsendableMessage(f"the address {mailbox[:200]!r} cannot be sent as written: {exc}") from None
    return address


_parsed_address_cached = functools.lru_cache(maxsize=4096)(_parsed_address)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _display_name(display: str) -> str:
    """A display name as a phrase: atoms, a quoted-string, or encoded-words ('' for none)."""
    display = " ".join(single_line(display).split())
    if not display:
        return ""
    if "=?" in display or not display.isascii() or len(display) > MAX_LINE // 2:
        return _encoded_words(display)
    return display if _PHRASE.fullmatch(display) else _quoted(display)


def _mailbox(mailbox: str) -> str:
    """A Mailbox as it is written in From, To, Cc and Reply-To: the same address as the envelope's."""
    address = parsed_address(mailbox).wire
    display = _display_name(split_mailbox(mailbox)[0])
    return f"{display} <{address}>" if display else address


def _address_list(name: str, mailboxes: list[str]) -> str:
    written = [_mailbox(mailbox) for mailbox in mailboxes]
    return _fold(name, [f"{item}," for item in written[:-1]] + written[-1:])


def _subject(subject: str) -> str:
    """Subject: folded at its spaces when it is printable ASCII in short words, else encoded-words."""
    subject = single_line(subject)
    words = subject.split(" ")
    if subject.isascii() and "=?" not in subject and all(len(word) <= MAX_LINE - 12 for word in words):
        return _fold("Subject", words)
    return _fold("Subject", [_encoded_words(subject)])


def needs_smtputf8(message: Message) -> bool:
    """A non-ASCII local part can only travel as SMTPUTF8 (RFC 6531); domains become IDNA instead."""
    mailboxes = [message.from_address, *message.to, *message.cc, *message.bcc, *message.reply_to]
    mailboxes += message.envelope_recipients or []
    return any(parsed_address(mailbox).smtputf8 for mailbox in mailboxes)


def _text_part(content: str, subtype: str) -> tuple[list[str], bytes]:
    """(Content-Type and Content-Transfer-Encoding lines, encoded body ending in CRLF) of a UTF-8 text part."""
    raw = content.replace("\r\n", "\n").replace("\r", "\n").encode()
    if raw.isascii() and not _BODY_CONTROL.search(raw) and max(map(len, raw.split(b"\n"))) <= MAX_LINE:
        encoding, body = "7bit", raw
    else:
        quoted_printable, base_64 = binascii.b2a_qp(raw, istext=True), base64.encodebytes(raw)
        encoding, body = (
            ("quoted-printable", quoted_printable) if len(quoted_printable) <= len(base_64) else ("base64", base_64)
        )
    body = body.replace(b"\n", b"\r\n")
    if not body.endswith(b"\r\n"):
        body += b"\r\n"
    return [f'Content-Type: text/{subtype}; charset="utf-8"', f"Content-Transfer-Encoding: {encoding}"], body


def _body(message: Message) -> tuple[list[str], bytes]:
    """(the top-level MIME header lines, the body): one text part, or multipart/alternative of two."""
    if message.html is None:
        return _text_part(message.text or "", "plain")
    if message.text is None:
        return _text_part(message.html, "html")
    parts = [_text_part(message.text, "plain"), _text_part(message.html, "html")]
    # "=_" never occurs in quoted-printable or base64; a 7bit part is checked all the same.
    boundary = f"=_{secrets.token_hex(16)}"
    while any(boundary.encode() in body for _, body in parts):
        boundary = f"=_{secrets.token_hex(16)}"
    # Each part keeps its final line break: the CRLF before a delimiter belongs to the delimiter (RFC 2046 5.1.1).
    body = b"".join(
        f"--{boundary}\r\n".encode() + "\r\n".join(lines).encode() + b"\r\n\r\n" + content + b"\r\n"
        for lines, content in parts
    )
    return [f'Content-Type: multipart/alternative; boundary="{boundary}"'], body + f"--{boundary}--\r\n".encode()


def render_message(message: Message) -> RenderedMessage:
    """The message as RFC 5322 bytes with CRLF line endings, ready to DKIM-sign and send."""
    smtputf8 = needs_smtputf8(message)
    sender_domain = parsed_address(message.from_address).domain
    message_id = f"<{message.public_id}@{sender_domain}>"
    headers = [_address_list("From", [message.from_address])]
    for name, mailboxes in (("To", message.to), ("Cc", message.cc), ("Reply-To", message.reply_to)):
        if mailboxes:
            headers.append(_address_list(name, mailboxes))
    headers += [_subject(message.subject), f"Date: {format_datetime(message.created_at)}", f"Message-ID: {message_id}"]
    if message.feedback_id:
        headers.append(f"Feedback-ID: {message.feedback_id}")
    content_headers, body = _body(message)
    headers += ["MIME-Version: 1.0", *content_headers]
    data = ("\r\n".join(headers) + "\r\n\r\n").encode() + body
    _check_header_block(data, [header.split(":", 1)[0] for header in headers])
    return RenderedMessage(data=data, message_id=message_id, sender_domain=sender_domain, smtputf8=smtputf8)

"""RFC 5322 / MIME rendering of an outbound message with the standard library's `email` package.

Header injection: every header value is built from parsed parts (display text, local part,
domain) through `email.headerregistry`, and any character that could end or fold a header line
(CR, LF, other control characters, Unicode line and paragraph separators) is turned into a space
before it gets there. RFC 2047 encoded-word syntax (`=?`) never reaches the registry as such,
because the email package would decode the word and write it back literally, CR LF included
(CVE-2024-6923, unfixed in the Python this runs on): a subject holding it is written fully
encoded, and in a display name it is broken up with a space. Finally the header block is checked: a
message whose headers are not exactly the ones set is unsendable. Bcc never becomes a header.
"""

import base64
import unicodedata
from dataclasses import dataclass
from email import policy
from email.headerregistry import Address
from email.message import EmailMessage
from email.utils import format_datetime

from mailservice.mailbox import split_mailbox
from messaging.models import Message


class UnsendableMessage(Exception):
    """The stored message cannot be expressed on the wire (it is failed, not retried)."""


@dataclass(frozen=True)
class Envelope:
    """What SMTP needs besides the message bytes."""

    mail_from: str
    recipients: list[str]
    smtputf8: bool


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


def _check_header_block(data: bytes, names: list[str]) -> None:
    """Refuse a rendering whose header lines are not exactly `names`, each a whole CRLF-ended line."""
    head = data.split(b"\r\n\r\n", 1)[0]
    lines = head.split(b"\r\n")
    found = [line.split(b":", 1)[0].decode("ascii", "replace") for line in lines if line[:1] not in (b" ", b"\t")]
    stray = any(b"\r" in line or b"\n" in line or b"\0" in line for line in lines)
    if stray or sorted(found) != sorted(names):
        raise UnsendableMessage("the message's headers could not be written safely")


def _wire_domain(domain: str) -> str:
    """The domain as it goes into headers and the envelope: IDNA (A-labels) when it is not ASCII."""
    if domain.isascii():
        return domain
    try:
        return domain.encode("idna").decode("ascii")
    except UnicodeError:
        raise UnsendableMessage(f"{domain!r} is not a valid internationalized domain name") from None


def bare_address(mailbox: str) -> str:
    """The addr-spec of a Mailbox in wire form; refuses control characters (they never reach SMTP)."""
    local, _, domain = split_mailbox(mailbox)[1].rpartition("@")
    if single_line(local) != local:
        raise UnsendableMessage(f"the address {mailbox!r} contains a control character")
    return f"{local}@{_wire_domain(domain)}"


def _address(mailbox: str) -> Address:
    display, _ = split_mailbox(mailbox)
    local, _, domain = bare_address(mailbox).rpartition("@")
    # The header registry decodes an encoded-word in a display name it does not quote (CR LF
    # included, as for the subject); a display name is cosmetic, so the syntax is broken up instead.
    display = " ".join(single_line(display).split()).replace("=?", "= ?")
    return Address(display_name=display, username=local, domain=domain)


def needs_smtputf8(message: Message) -> bool:
    """A non-ASCII local part can only travel as SMTPUTF8 (RFC 6531); domains become IDNA instead."""
    mailboxes = [message.from_address, *message.to, *message.cc, *message.bcc, *message.reply_to]
    return not all(split_mailbox(mailbox)[1].rpartition("@")[0].isascii() for mailbox in mailboxes)


def envelope_for(*, message: Message, recipients: list[str], return_path_domain: str | None) -> Envelope:
    """MAIL FROM is the VERP return path when one is configured, else the From address."""
    mail_from = (
        f"bounces+{message.public_id}@{return_path_domain}"
        if return_path_domain
        else bare_address(message.from_address)
    )
    return Envelope(mail_from=mail_from, recipients=recipients, smtputf8=needs_smtputf8(message))


def render_message(message: Message) -> RenderedMessage:
    """The message as RFC 5322 bytes with CRLF line endings, ready to DKIM-sign and send."""
    smtputf8 = needs_smtputf8(message)
    sender = _address(message.from_address)
    mime = EmailMessage(policy=policy.SMTPUTF8 if smtputf8 else policy.SMTP)
    mime["From"] = sender
    if message.to:
        mime["To"] = [_address(mailbox) for mailbox in message.to]
    if message.cc:
        mime["Cc"] = [_address(mailbox) for mailbox in message.cc]
    if message.reply_to:
        mime["Reply-To"] = [_address(mailbox) for mailbox in message.reply_to]
    subject = single_line(message.subject)
    if "=?" in subject:
        mime.set_raw("Subject", _encoded_words(subject))
    else:
        mime["Subject"] = subject
    mime["Date"] = format_datetime(message.created_at)
    message_id = f"<{message.public_id}@{sender.domain}>"
    mime["Message-ID"] = message_id

    has_text, has_html = message.text is not None, message.html is not None
    if has_text or not has_html:
        mime.set_content(message.text or "", subtype="plain", charset="utf-8")
        if has_html:
            mime.add_alternative(message.html, subtype="html", charset="utf-8")
    else:
        mime.set_content(message.html, subtype="html", charset="utf-8")
    data = mime.as_bytes()
    _check_header_block(data, list(mime.keys()))
    return RenderedMessage(data=data, message_id=message_id, sender_domain=sender.domain, smtputf8=smtputf8)

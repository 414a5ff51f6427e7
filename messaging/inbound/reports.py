"""Classify mail sent back to us: delivery status notifications (bounces, delays) and ARF complaints.

The standard forms come first: RFC 3464 `multipart/report; report-type=delivery-status` and
RFC 5965 `multipart/report; report-type=feedback-report`. Many MTAs (qmail, older Exim, broken
relays) still send plain-text bounces, so a message from a mailer daemon, or with a bounce
subject, falls back to reading the recipients and SMTP codes out of the text. Auto-replies
(vacation notices) are not reports. Nothing here raises on malformed input.
"""

import re
from dataclasses import dataclass, field
from email.message import Message as EmailMessage
from enum import StrEnum

from messaging.inbound.parsing import (
    addresses,
    body_text,
    decode_header_value,
    header,
    parse_bytes,
    part_text,
    subparts,
)


class ReportedOutcome(StrEnum):
    BOUNCE = "bounce"  # permanent failure: the recipient will not get it
    DELAY = "delay"  # transient: the remote MTA is still trying
    COMPLAINT = "complaint"


@dataclass(frozen=True)
class RecipientReport:
    address: str  # lower-case bare address; "" when the report redacts it
    outcome: ReportedOutcome
    status: str = ""  # the enhanced status code, e.g. 5.1.1
    diagnostic: str = ""  # e.g. "smtp; 550 5.1.1 <a@example.org>: user unknown", or the ARF feedback type

    @property
    def detail(self) -> str:
        return " ".join(part for part in (self.status, self.diagnostic) if part)


@dataclass(frozen=True)
class Report:
    recipients: list[RecipientReport] = field(default_factory=list)
    original_message_id: str = ""  # the Message-ID of the message reported on, if the report carries it

    @property
    def kind(self) -> str:
        """bounce, delay, complaint, or none (not a report we can act on)."""
        outcomes = {recipient.outcome for recipient in self.recipients}
        for outcome in (ReportedOutcome.COMPLAINT, ReportedOutcome.BOUNCE, ReportedOutcome.DELAY):
            if outcome in outcomes:
                return outcome.value
        return "none"


NOT_A_REPORT = Report()

_ENHANCED_STATUS = re.compile(r"\b([245]\.\d{1,3}\.\d{1,3})\b")
_SMTP_REPLY = re.compile(r"\b([45]\d\d)[ -]")
_MESSAGE_ID_LINE = re.compile(r"^message-id:\s*(<[^<>\s]+>)", re.IGNORECASE | re.MULTILINE)
_ADDRESS = r"[^\s<>@,;:\"()\[\]]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}"
# Postfix and qmail: "<rcpt@example.org>: host ... said: 550 ..."; Exim: the address alone on a line.
_FAILED_ADDRESS_LINE = re.compile(rf"^\s*<({_ADDRESS})>\s*:|^\s+<?({_ADDRESS})>?\s*:?\s*$", re.MULTILINE)
# Where a plain-text bounce starts quoting the original message: addresses below are not failures.
_ORIGINAL_COPY = re.compile(
    r"^\s*-{2,}\s*(this is a copy|below this line|original message|the original message|undelivered message)"
    r"|^\s*(original message follows|--- ?below this line)",
    re.IGNORECASE | re.MULTILINE,
)
_DAEMON_SENDER = re.compile(r"mailer-daemon|postmaster|mail delivery (subsystem|system)", re.IGNORECASE)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|returned mail|delivery status notification|delivery (failure|has failed|problem)"
    r"|mail delivery failed|failure notice|could not be delivered|non-?delivery|delayed mail|delivery delayed",
    re.IGNORECASE,
)
_AUTO_REPLY_SUBJECT = re.compile(r"^(automatic reply|auto(matic)?[- ]?(reply|response)|out of (the )?office)", re.I)
_PERMANENT_WORDS = re.compile(r"permanent(ly)?|given up|giving up|not going to try again", re.IGNORECASE)
_DELAY_WORDS = re.compile(
    r"not yet been delivered|delivery (is )?delayed|will (continue|keep|retry)|still trying|temporar(y|ily)",
    re.IGNORECASE,
)
# ARF feedback types that are not complaints about our mail (RFC 6650 not-spam, RFC 6591 auth failures).
_NOT_COMPLAINTS = {"not-spam", "auth-failure"}


def _fields(text: str) -> list[dict[str, str]]:
    """`Name: value` blocks separated by blank lines (RFC 3464 and RFC 5965 report bodies)."""
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    name = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current, name = {}, ""
        elif line[0] in " \t" and name:
            current[name] += " " + line.strip()
        elif ":" in line:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            current.setdefault(name, value.strip())
    if current:
        blocks.append(current)
    return blocks


def _report_blocks(part: EmailMessage) -> list[dict[str, str]]:
    """The parser pre-splits message/* parts into header blocks; a mislabelled part is plain text."""
    payload = part.get_payload()
    if isinstance(payload, list):
        blocks = []
        for block in subparts(part):
            fields = {name.lower(): decode_header_value(value) for name, value in block.items()}
            trailing = block.get_payload()
            blocks += [fields, *_fields(trailing)] if isinstance(trailing, str) else [fields]
        return [block for block in blocks if block]
    return _fields(part_text(part) or "")


def _bare(value: str) -> str:
    """'rfc822; <A@Example.org>' -> 'a@example.org'."""
    address = value.rpartition(";")[2].strip().strip("<>").strip()
    return address.lower() if "@" in address else ""


def _normalise_message_id(value: str) -> str:
    value = value.strip()
    if not value:
        return ""
    return value if value.startswith("<") else f"<{value.strip('<>')}>"


def _original_message_id(message: EmailMessage) -> str:
    """The Message-ID of the original as quoted in the report: an attached message, its headers, or text."""
    texts = []
    for part in message.walk():
        content_type = part.get_content_type()
        if content_type == "message/rfc822" and subparts(part):
            found = header(subparts(part)[0], "Message-ID")
            if found:
                return _normalise_message_id(found)
        elif content_type == "text/rfc822-headers":
            found = header(parse_bytes((part_text(part) or "").encode("utf-8", "replace")), "Message-ID")
            if found:
                return _normalise_message_id(found)
        elif part is not message or not part.is_multipart():
            text = part_text(part)
            if text:
                texts.append(text)
    for text in texts:
        match = _MESSAGE_ID_LINE.search(text)
        if match:
            return match.group(1)
    return ""


def _first_part(message: EmailMessage, *content_types: str) -> EmailMessage | None:
    return next((part for part in message.walk() if part.get_content_type() in content_types), None)


def _dsn_recipients(part: EmailMessage) -> list[RecipientReport] | None:
    """Failed and delayed recipients; None when the part names no recipient at all (a broken report)."""
    recipients, named = [], False
    for block in _report_blocks(part):
        address = _bare(block.get("original-recipient", "")) or _bare(block.get("final-recipient", ""))
        if not address:
            continue
        named = True
        action = block.get("action", "").split()[0].lower() if block.get("action") else ""
        status_match = _ENHANCED_STATUS.search(block.get("status", ""))
        status = status_match.group(1) if status_match else ""
        if action == "failed" or (not action and status.startswith("5")):
            outcome = ReportedOutcome.BOUNCE
        elif action == "delayed" or (not action and status.startswith("4")):
            outcome = ReportedOutcome.DELAY
        else:
            continue  # delivered, relayed, expanded: a success notice, nothing to act on
        recipients.append(RecipientReport(address, outcome, status, block.get("diagnostic-code", "")))
    return recipients if named else None


def _complaint(message: EmailMessage, feedback: EmailMessage | None) -> Report:
    fields: dict[str, str] = {}
    for block in _report_blocks(feedback) if feedback is not None else []:
        fields |= block
    feedback_type = fields.get("feedback-type", "abuse").lower()
    if feedback_type in _NOT_COMPLAINTS:
        return NOT_A_REPORT
    address = _bare(fields.get("original-rcpt-to", "")) or _bare(fields.get("removal-recipient", ""))
    if not address:
        original = _first_part(message, "message/rfc822")
        embedded = subparts(original) if original is not None else []
        if embedded:
            address = next(iter(addresses(embedded[0], "To")), "")
    recipient = RecipientReport(address, ReportedOutcome.COMPLAINT, diagnostic=f"feedback-type: {feedback_type}")
    return Report([recipient], _original_message_id(message))


def _plain_text_bounce(message: EmailMessage) -> Report:
    """Postfix/Exim/qmail-style bounces: recipients and codes read from the human-readable text."""
    text = body_text(message) or ""
    copy_starts = _ORIGINAL_COPY.search(text)
    notice = text[: copy_starts.start()] if copy_starts else text
    found = addresses(message, "X-Failed-Recipients")
    for match in _FAILED_ADDRESS_LINE.finditer(notice):
        address = (match.group(1) or match.group(2)).lower()
        if address not in found and not _DAEMON_SENDER.search(address):
            found.append(address)
    if not found:
        return NOT_A_REPORT
    status_match = _ENHANCED_STATUS.search(notice)
    status = status_match.group(1) if status_match else ""
    reply_match = _SMTP_REPLY.search(notice)
    evidence = status_match or reply_match
    diagnostic = ""
    if evidence:
        line_start = notice.rfind("\n", 0, evidence.start()) + 1
        line_end = notice.find("\n", evidence.end())
        diagnostic = notice[line_start : line_end if line_end != -1 else None].strip()
    if _PERMANENT_WORDS.search(notice) or status.startswith("5"):
        outcome = ReportedOutcome.BOUNCE
    elif (
        status.startswith("4") or (reply_match and reply_match.group(1).startswith("4")) or _DELAY_WORDS.search(notice)
    ):
        outcome = ReportedOutcome.DELAY
    else:
        outcome = ReportedOutcome.BOUNCE
    recipients = [RecipientReport(address, outcome, status, diagnostic) for address in found]
    return Report(recipients, _original_message_id(message))


def _is_auto_reply(message: EmailMessage) -> bool:
    auto_submitted = header(message, "Auto-Submitted").lower()
    return (
        auto_submitted.startswith("auto-replied")
        or bool(message.get("X-Autoreply") or message.get("X-Autorespond"))
        or header(message, "Precedence").lower() == "auto_reply"
        or bool(_AUTO_REPLY_SUBJECT.match(header(message, "Subject")))
    )


def classify(raw: bytes) -> Report:
    """What a message sent back to us reports; `kind == "none"` when it is not a report we can act on."""
    message = parse_bytes(raw)
    report_type = str(message.get_param("report-type", "", header="content-type") or "").lower()

    feedback = _first_part(message, "message/feedback-report")
    if feedback is not None or report_type == "feedback-report":
        return _complaint(message, feedback)

    status_part = _first_part(message, "message/delivery-status", "message/global-delivery-status")
    if status_part is not None:
        recipients = _dsn_recipients(status_part)
        if recipients is not None:
            return Report(recipients, _original_message_id(message)) if recipients else NOT_A_REPORT

    from_daemon = bool(_DAEMON_SENDER.search(header(message, "From"))) or bool(message.get("X-Failed-Recipients"))
    if from_daemon or report_type == "delivery-status":
        return _plain_text_bounce(message)
    if _is_auto_reply(message):
        return NOT_A_REPORT
    if _BOUNCE_SUBJECT.search(header(message, "Subject")):
        return _plain_text_bounce(message)
    return NOT_A_REPORT

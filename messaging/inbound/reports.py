"""Classify mail sent back to us: delivery status notifications (bounces, delays) and complaints.

`classify(raw)` is pure (bytes in, a `Report` out) so that corpora of real reports can be run
against it. The rules come from the formats, in this order:

1. RFC 5965 ARF (`message/feedback-report`), one complaint per `Original-Rcpt-To` (a report may
   name several), and the other complaint formats: Microsoft JMRP (the complained-about message
   attached with `X-HmXmrOriginalRecipient`) and Apple's unsubscribe (`X-Apple-Unsubscribe`).
2. RFC 3464 DSNs (`message/delivery-status`) and RFC 6533 global DSNs
   (`message/global-delivery-status`, UTF-8 fields, `utf-8;` address types with `\\x{HH}` escapes).
   `Action: failed` (and the `failure`/`error`/`expired` variants real MTAs write) is final:
   with a 5.x.x status (RFC 3463 permanent) it is a hard `bounce`, with 4.x.x a `soft_bounce`
   (the relay gave up on a temporary condition, e.g. 4.2.2 mailbox full). `delayed` is a `delay`.
3. Auto-replies are not reports, whoever sends them: RFC 3834 `Auto-Submitted: auto-replied` from
   anyone but a mail system (MTAs write it on their bounces too), `X-Autoreply`/`X-Autorespond`,
   `Precedence: auto_reply`, vacation subjects, and challenge-response or whitelist requests
   (TMDA's `X-Delivery-Agent`, the services' own headers and domains, their subjects and wording).
4. A plain-text bounce from a mailer daemon (or with a bounce subject or `X-Failed-Recipients`):
   the recipients and codes are read from the first lines of the notice. Only failed recipients
   are named: never the report's own sender or recipient, the returned message's sender or a
   list address (unless the returned message was also addressed to it), nor an address the
   prose offers after "please use", "instead", "forwarded to", "expanded from"...

Every heuristic reads a bounded region (NOTICE_LIMIT characters, lines cut at LINE_LIMIT) with
regexes free of nested quantifiers, so the cost is linear in the input whatever it holds. Nothing
here raises on malformed input.
"""

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.message import Message as EmailMessage
from enum import StrEnum
from functools import partial

from messaging.inbound.parsing import (
    UnparsableMessage,
    addresses,
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


class ReportedOutcome(StrEnum):
    BOUNCE = "bounce"  # permanent failure: the recipient will not get it
    SOFT_BOUNCE = "soft_bounce"  # the relay gave up after temporary failures (4.x.x with a final action)
    DELAY = "delay"  # transient: the remote MTA is still trying
    COMPLAINT = "complaint"


@dataclass(frozen=True)
class RecipientReport:
    address: str  # lower-case bare address; "" when the report redacts it
    outcome: ReportedOutcome
    status: str = ""  # the enhanced status code, e.g. 5.1.1
    diagnostic: str = ""  # e.g. "smtp; 550 5.1.1 <a@example.org>: user unknown"
    feedback_type: str = ""  # complaints: the ARF Feedback-Type (abuse, opt-out, ...)

    @property
    def detail(self) -> str:
        return " ".join(part for part in (self.status, self.diagnostic) if part)


@dataclass(frozen=True)
class Report:
    recipients: list[RecipientReport] = field(default_factory=list)
    original_message_id: str = ""  # the Message-ID of the message reported on, if the report carries it

    @property
    def kind(self) -> str:
        """complaint, bounce, soft_bounce, delay, or none (not a report we can act on)."""
        outcomes = {recipient.outcome for recipient in self.recipients}
        for outcome in (
            ReportedOutcome.COMPLAINT,
            ReportedOutcome.BOUNCE,
            ReportedOutcome.SOFT_BOUNCE,
            ReportedOutcome.DELAY,
        ):
            if outcome in outcomes:
                return outcome.value
        return "none"


NOT_A_REPORT = Report()

# Failure statuses only (RFC 3463 classes 4 and 5): a transcript's 2.x.x successes are no evidence.
_ENHANCED_STATUS = re.compile(r"\b([45])\.(\d{1,3})\.(\d{1,3})\b")
_SMTP_REPLY = re.compile(r"(?<![\d.])([45]\d\d)(?:[ -]|$)")
_MESSAGE_ID_LINE = re.compile(r"^[ \t>]*message-id:[ \t]*(<[^<>\s]{1,250}>)", re.IGNORECASE)
# An address as bounces print it. Each part is a single character class with a bounded repeat,
# and lines are cut at LINE_LIMIT, so a search costs at most LINE_LIMIT steps per start position.
_LOCAL_PART = r"[^\s<>@,;:\"()\[\]'`|=/]{1,64}"  # any UTF-8 (RFC 6531) but no delimiter or path
_DOMAIN = r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}"  # as printed by MTAs: ASCII (IDNA)
_ADDRESS = re.compile(f"{_LOCAL_PART}@{_DOMAIN}")
# Where notices name a failed recipient: the address alone on its line (Exim, Exchange), "<rcpt>:"
# (Postfix, qmail), "rcpt... reason" (Sendmail), a labelled field, or an SMTP RCPT command.
_RECIPIENT_LINE = re.compile(
    rf"^[ \t>]*(?:(?:in|out)[ \t]*:[ \t]*)?(?:[45]\d\d[ \t-]{{1,9}})?(?:"
    rf"<?(?P<alone>{_LOCAL_PART}@{_DOMAIN})>?[ \t]*[:.,;]?[ \t]*$"
    # Postfix: "<member@example.net> (expanded from <list@example.org>): host ... said: 550 ..."
    rf"|<(?P<colon>{_LOCAL_PART}@{_DOMAIN})>[ \t]*(?:\(expanded from [^()]{{0,300}}\)[ \t]*)?:"
    rf"|<?(?P<reason>{_LOCAL_PART}@{_DOMAIN})>?(?:\.\.\.|:)[ \t]"
    rf"|(?:rcpt to|(?:failed |original |final )?recipient(?: address)?|address|to)[ \t]*:[ \t]*(?:rfc822;[ \t]*)?"
    rf"<?(?P<field>{_LOCAL_PART}@{_DOMAIN}))",
    re.IGNORECASE,
)
# Where a plain-text bounce starts quoting the original message: addresses below are not failures.
_ORIGINAL_COPY = re.compile(
    # "------ This is a copy of the message ------", "--- The header of the original message ---"
    r"^[ \t]*-{2,}[^\n]{0,40}?(copy|original|below this line|undelivered message|returned message|headers? follow)"
    r"|^[ \t]*(original message follows|below this line is a copy|message headers follow|unsent message below"
    r"|here is a copy|the headers of the original|content-type: message/rfc822|received: from|return-path:)",
    re.IGNORECASE,
)
_DAEMON = re.compile(
    r"mailer-daemon|post_?master|mail delivery (subsystem|system)|mail ?administrator|mailadmin|mail-?router"
    r"|mail ?delivery|(delivery|notification)[-_ ]?(status|system|agent)|^\W*(root|mail|smtp)@",
    re.IGNORECASE,
)
_BOUNCE_SUBJECT = re.compile(
    r"undeliver|returned mail|return(ed)? to sender|delivery status notification|delivery (failure|has failed|problem)"
    r"|delivery (notification|report)|mail delivery failed|failure notice|could not be delivered|non-?delivery"
    r"|delayed mail|delivery delayed|mail system error|failed delivery|delivery failed|not delivered"
    r"|message failure|rejected|unable to deliver|warning: could not send|nondeliverable|error sending message",
    re.IGNORECASE,
)
_AUTO_REPLY_SUBJECT = re.compile(
    r"^\W*(auto(matic)?[- ]?(reply|response|antwort)|out of (the )?office|vacation|away from|i am away"
    r"|abwesenheit|absence|r[ée]ponse automatique|risposta automatica|respuesta autom|resposta autom"
    r"|automatisch(e)? (antwoord|antwort)|autosvar|automaattinen vastaus|automatyczna odpowied|自動応答|自动回复)",
    re.IGNORECASE,
)
_VACATION_WORDS = re.compile(
    r"out of (the )?office|on (annual |parental |maternity |sick )?(vacation|holiday|leave)|away (from|until)"
    r"|closed (for|until)|(back|return(ing)?) (in the office )?on|limited access to (my )?e-?mail|abwesend"
    r"|en cong[ée]s?|vacances|fuera de la oficina|in ferie",
    re.IGNORECASE,
)
_PERMANENT_WORDS = re.compile(
    r"permanent(ly)?|given up|giving up|not going to try again|no such (user|mailbox|address)|user unknown"
    r"|unknown user|does not exist|doesn'?t exist|not exist|invalid (recipient|address|mailbox)|address rejected",
    re.IGNORECASE,
)
# Without a status code: the relay gave up on a condition that may clear (RFC 3463 4.2.2, 4.4.7).
_SOFT_WORDS = re.compile(
    r"mailbox (is )?full|over ?quota|quota exceeded|exceeded (the )?(storage|quota)|retry time(out)? (not )?exceeded"
    r"|message (has been )?expired|too many (hops|retries)|delivery time ?out|could not be delivered within",
    re.IGNORECASE,
)
# Lines of a notice that carry addresses that did not fail: quoted header fields, the SMTP MAIL command.
_NOT_A_RECIPIENT_LINE = re.compile(
    r"^[ \t>]*(in:[ \t]*)?(message-id|from|sender|reply-to|return-path|date|subject|references|in-reply-to"
    r"|received|mail from|x-[\w-]+)[ \t]*:",
    re.IGNORECASE,
)
# Where prose goes on to name an address that did not fail: an alternative the recipient offers, where
# mail goes (or no longer goes) instead, the alias or list a failed address was expanded from.
_NOT_FAILED_AFTER = re.compile(
    r"instead|alternat(e|ive)|new (e-?mail |mail )?address|(address|e-?mail) (has )?changed|moved to"
    r"|now (at|using)|forward(ed|ing)?( (it|mail|messages?|e-?mails?))? to|redirect(ed|ing)? to|expanded from"
    r"|reach (me|us|him|her|them)|please (use|write|send|mail|e-?mail|contact|try|resend)|contact|write to"
    r"|send (it|your (message|mail|e-?mail)) to",
    re.IGNORECASE,
)
# How a line ends when it announces an alternative on the next one (a cheap test before _NOT_FAILED_AFTER).
_PHRASE_ENDS = ("instead", "address", "to", "at", "use", "contact", "below", "addresses", "using")
# Challenge-response and whitelist systems hold mail until the sender proves to be a person: their
# requests are auto-replies, whatever failure they claim. Subjects, then the wording of the request.
_CHALLENGE_SUBJECT = re.compile(
    r"please confirm your (e-?mail|message)|verify your (e-?mail|message|address)"
    r"|confirm(ation of)? your (e-?mail|message)|white-?list(ing)? request|request (to be )?(white-?list|approv)"
    r"|approval required|sender verification"
    r"|(awaiting|pending|held for|requires?|needs?) (your |sender )?(verification|confirmation|approval)"
    r"|not a (robot|spammer)|challenge|guest list|spam ?arrest|boxbe|mailwasher|sendio|choicemail|mailblocks|tmda",
    re.IGNORECASE,
)
_CHALLENGE_WORDS = re.compile(
    r"challenge[- ]?response|white-?list|approved senders|(not|aren'?t) a (robot|spammer|machine)"
    r"|(prove|verify|confirm|show) (that )?(you are|you'?re|it is not) (a |not a )?(human|real|person|robot)"
    r"|guest list|spam ?arrest|boxbe|mailwasher|sendio|choicemail|mailblocks|tmda",
    re.IGNORECASE,
)
# Services known to send challenges (Boxbe, Spam Arrest, MailWasher, Sendio, Mailblocks, Bluebottle,
# ChoiceMail) and the local parts challengers use (EarthLink's spamblocker-challenge@).
_CHALLENGE_SENDER = re.compile(
    r"challenge[^@\s]{0,64}@|[@.](boxbe\.com|spamarrest\.com|mailwasher\.net|firetrust\.com|sendio\.com"
    r"|mailblocks\.com|bluebottle\.com|digiportal\.com)\b",
    re.IGNORECASE,
)
_CHALLENGE_HEADER_PREFIXES = ("x-tmda", "x-boxbe", "x-spamarrest", "x-mailwasher", "x-challenge", "x-askversion")
_LIST_HEADERS = ("List-Post", "List-Owner", "List-Help", "List-Subscribe", "List-Unsubscribe", "List-Id", "X-BeenThere")
# A line that states a failure in words (codes are _ENHANCED_STATUS and _SMTP_REPLY).
_FAILURE_WORDS = re.compile(
    r"fail|undeliver|(not|n'?t) (be |been )?deliver|did not reach|following (recipient|address)|aborted"
    r"|could(n'?t| not) (be )?deliver|unable to deliver|reject|refused|unknown|no such|invalid|does(n'?t| not) exist"
    r"|bounced|unavailable|not found|disabled|inactive|over ?quota|mailbox (is )?full",
    re.IGNORECASE,
)
_HEADER_LINE = re.compile(r"^[A-Za-z0-9-]{1,76}:")
_DELAY_WORDS = re.compile(
    r"not yet been delivered|delivery (is |has been )?delayed|will (continue|keep|retry|try)|still trying"
    r"|retry(ing)? (until|for)|warning: message|delivery attempts will continue|delayed",
    re.IGNORECASE,
)
# ARF feedback types that are not complaints about our mail (RFC 6650 not-spam, RFC 6591 auth failures).
_NOT_COMPLAINTS = {"not-spam", "auth-failure"}
_FINAL_ACTIONS = {"failed", "failure", "error", "expired", "undeliverable", "bounced", "bounce"}
_DELAY_ACTIONS = {"delayed", "delay", "deferred"}
_UTF8_ESCAPE = re.compile(r"\\x\{([0-9A-Fa-f]{1,6})\}")


def _lines(text: str) -> Iterator[str]:
    """The first NOTICE_LIMIT characters of `text`, line by line, each cut at LINE_LIMIT."""
    for line in text[:NOTICE_LIMIT].splitlines():
        yield line[:LINE_LIMIT]


def _fields(text: str) -> list[dict[str, list[str]]]:
    """`Name: value` blocks separated by blank lines (RFC 3464 and RFC 5965 report bodies); every value kept."""
    blocks: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] = {}
    name = ""
    for line in _lines(text):
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


def _report_blocks(part: EmailMessage) -> list[dict[str, list[str]]]:
    """The parser pre-splits message/* parts into header blocks; a mislabelled part is plain text."""
    payload = part.get_payload()
    if isinstance(payload, list):
        blocks: list[dict[str, list[str]]] = []
        for block in payload:
            if not isinstance(block, EmailMessage):
                continue
            fields: dict[str, list[str]] = {}
            for name, value in block.items():
                fields.setdefault(name.lower(), []).append(decode_header_value(value)[:HEADER_LIMIT])
            # The bytes, not get_payload(): that would replace undeclared 8-bit (RFC 6533 UTF-8) with U+FFFD.
            trailing = None if block.is_multipart() else block.get_payload(decode=True)
            blocks += [fields, *_fields(decode_bytes(trailing))] if isinstance(trailing, bytes) else [fields]
        return [block for block in blocks if block]
    return _fields(part_text(part) or "")


def _first(block: dict[str, list[str]], name: str) -> str:
    values = block.get(name)
    return values[0] if values else ""


def _bare(value: str) -> str:
    """'rfc822; <A@Example.org>' -> 'a@example.org'; 'utf-8; zo\\x{EB}@example.org' -> 'zoë@example.org'."""
    address_type, semicolon, address = value.partition(";")
    if not semicolon:
        address = address_type
    elif address_type.strip().lower() in {"utf-8", "unknown"}:
        address = _UTF8_ESCAPE.sub(lambda match: _code_point(match.group(1)), address)
    address = address.strip().strip("<>").strip().strip('"').strip()
    if "<" in address:  # "Name <a@example.org>"
        address = address.rpartition("<")[2].partition(">")[0]
    return address.lower() if "@" in address and " " not in address else ""


def _code_point(hex_digits: str) -> str:
    value = int(hex_digits, 16)
    return chr(value) if value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF else "\ufffd"


def _normalise_message_id(value: str) -> str:
    value = value.strip()[:HEADER_LIMIT]
    if not value:
        return ""
    return value if value.startswith("<") else f"<{value.strip('<>')}>"


def _original_message_id(message: EmailMessage) -> str:
    """The Message-ID of the original as quoted in the report: an attached message, its headers, or text."""
    texts = []
    for part in message.walk():
        content_type = part.get_content_type()
        if content_type in {"message/rfc822", "message/global"} and subparts(part):
            found = header(subparts(part)[0], "Message-ID")
            if found:
                return _normalise_message_id(found)
        elif content_type in {"text/rfc822-headers", "message/global-headers"}:
            found = header(parse_bytes((part_text(part) or "")[:NOTICE_LIMIT].encode("utf-8", "replace")), "Message-ID")
            if found:
                return _normalise_message_id(found)
        elif part is not message or not part.is_multipart():
            text = part_text(part)
            if text:
                texts.append(text)
    for text in texts:
        for line in _lines(text):
            match = _MESSAGE_ID_LINE.match(line)
            if match:
                return match.group(1)
    return ""


def _first_part(message: EmailMessage, *content_types: str) -> EmailMessage | None:
    return next((part for part in message.walk() if part.get_content_type() in content_types), None)


def _status_in(text: str) -> str:
    match = _ENHANCED_STATUS.search(text[:LINE_LIMIT])
    return ".".join(match.groups()) if match else ""


def _final_outcome(status: str, evidence: str) -> ReportedOutcome:
    """A final failure: hard when the status (or, lacking one, the SMTP reply) is permanent."""
    if status:
        return ReportedOutcome.BOUNCE if status.startswith("5") else ReportedOutcome.SOFT_BOUNCE
    reply = _SMTP_REPLY.search(evidence[:LINE_LIMIT])
    return ReportedOutcome.SOFT_BOUNCE if reply and reply.group(1).startswith("4") else ReportedOutcome.BOUNCE


def _dsn_recipients(part: EmailMessage) -> list[RecipientReport] | None:
    """Failed and delayed recipients; None when the part names no recipient at all (a broken report)."""
    return _dsn_fields_recipients(_report_blocks(part))


def _dsn_fields_recipients(blocks: list[dict[str, list[str]]]) -> list[RecipientReport] | None:
    """The recipients RFC 3464 per-recipient fields report on; None when no block names a recipient."""
    recipients, named = [], False
    for block in blocks:
        address = _bare(_first(block, "original-recipient")) or _bare(_first(block, "final-recipient"))
        if not address:
            continue
        named = True
        action = (_first(block, "action").split() or [""])[0].lower().strip(".;:")
        diagnostic = _first(block, "diagnostic-code")
        status = _status_in(_first(block, "status"))
        if action in _FINAL_ACTIONS:
            outcome = _final_outcome(status, diagnostic)
        elif action in _DELAY_ACTIONS or (not action and status.startswith("4")):
            outcome = ReportedOutcome.DELAY
        elif not action and status.startswith("5"):
            outcome = ReportedOutcome.BOUNCE
        else:
            continue  # delivered, relayed, expanded: a success notice, nothing to act on
        recipients.append(RecipientReport(address, outcome, status, diagnostic[:HEADER_LIMIT]))
    return recipients if named else None


def _embedded_message(message: EmailMessage) -> EmailMessage | None:
    original = _first_part(message, "message/rfc822", "message/global")
    embedded = subparts(original) if original is not None else []
    return embedded[0] if embedded else None


def _complaint(message: EmailMessage) -> Report:
    """RFC 5965: one complaint per Original-Rcpt-To of every feedback-report part."""
    reports = [part for part in message.walk() if part.get_content_type() == "message/feedback-report"]
    recipients: list[RecipientReport] = []
    for part in reports:
        fields: dict[str, list[str]] = {}
        for block in _report_blocks(part):
            for name, values in block.items():
                fields.setdefault(name, []).extend(values)
        feedback_type = (_first(fields, "feedback-type") or "abuse").lower()
        if feedback_type in _NOT_COMPLAINTS:
            continue
        found = [_bare(value) for value in fields.get("original-rcpt-to", []) + fields.get("removal-recipient", [])]
        for address in dict.fromkeys(found) or [""]:
            recipients.append(RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type=feedback_type))
    if not recipients and not reports:  # declared a feedback report but carries no report part
        recipients = [RecipientReport("", ReportedOutcome.COMPLAINT, feedback_type="abuse")]
    if not recipients:
        return NOT_A_REPORT
    if all(not recipient.address for recipient in recipients):
        embedded = _embedded_message(message)
        # A list address reaches many readers: it does not say who complained.
        to = (
            [a for a in addresses(embedded, "To") if a not in _list_addresses(embedded)] if embedded is not None else []
        )
        if len(to) == 1:
            recipients = [RecipientReport(to[0], r.outcome, feedback_type=r.feedback_type) for r in recipients[:1]]
    return Report(recipients, _original_message_id(message))


def _vendor_complaint(message: EmailMessage) -> Report | None:
    """Complaints outside ARF: Microsoft JMRP and Apple's unsubscribe notices; None when neither."""
    embedded = _embedded_message(message)
    if embedded is not None and embedded.get("X-HmXmrOriginalRecipient"):
        address = _bare(header(embedded, "X-HmXmrOriginalRecipient"))
        complaint = RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type="abuse")
        return Report([complaint], _original_message_id(message))
    if header(message, "X-Apple-Unsubscribe").lower() == "true":
        to = addresses(message, "To")
        address = to[0] if len(to) == 1 else ""
        return Report([RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type="opt-out")])
    return None


def _ses_notification(message: EmailMessage) -> Report | None:
    """An Amazon SES notification delivered by SNS email: JSON naming the bounced or complaining recipients."""
    if "@sns.amazonaws.com" not in header(message, "From")[:HEADER_LIMIT].lower():
        return None
    text = (body_text(message) or "")[:NOTICE_LIMIT]
    notification = _json_object(text[text.find("{") :]) if "{" in text else None
    if isinstance(notification, dict) and isinstance(notification.get("Message"), str):
        notification = _json_object(notification["Message"])
    if not isinstance(notification, dict):
        return None
    kind = str(notification.get("notificationType") or notification.get("eventType") or "").lower()
    recipients: list[RecipientReport] = []
    if kind == "bounce" and isinstance(notification.get("bounce"), dict):
        bounce = notification["bounce"]
        permanent = str(bounce.get("bounceType", "")).lower() == "permanent"
        for entry in bounce.get("bouncedRecipients") or []:
            if isinstance(entry, dict):
                status = _status_in(str(entry.get("status", "")))
                outcome = ReportedOutcome.BOUNCE if permanent else ReportedOutcome.SOFT_BOUNCE
                recipients.append(
                    RecipientReport(
                        _bare(str(entry.get("emailAddress", ""))),
                        outcome,
                        status,
                        str(entry.get("diagnosticCode", ""))[:HEADER_LIMIT],
                    )
                )
    elif kind == "complaint" and isinstance(notification.get("complaint"), dict):
        complaint = notification["complaint"]
        feedback_type = str(complaint.get("complaintFeedbackType") or "abuse").lower()
        for entry in complaint.get("complainedRecipients") or []:
            if isinstance(entry, dict):
                address = _bare(str(entry.get("emailAddress", "")))
                recipients.append(RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type=feedback_type))
    return Report(recipients) if recipients else NOT_A_REPORT


def _json_object(text: str) -> dict | None:
    """The JSON object `text` starts with; SNS e-mail cuts long notifications, so a cut one is read
    field by field (RawDecoder stops at the first error, so only what precedes the cut is lost)."""
    try:
        decoded = json.JSONDecoder().raw_decode(text.strip())[0]
    except ValueError:
        return _cut_notification(text)
    return decoded if isinstance(decoded, dict) else None


# A field of a (possibly JSON-in-JSON, so backslash-escaped) SES notification.
_JSON_FIELD = re.compile(
    r'\\?"(notificationType|bounceType|emailAddress|status|complaintFeedbackType)\\?"\s{0,9}:\s{0,9}\\?"([^"\\]{0,320})'
)


def _cut_notification(text: str) -> dict | None:
    """The fields of a cut SES notification that say what happened, in the shape of a whole one."""
    fields: dict[str, list[str]] = {}
    for match in _JSON_FIELD.finditer(text[:NOTICE_LIMIT]):
        fields.setdefault(match.group(1), []).append(match.group(2))
    kind = (fields.get("notificationType") or [""])[0]
    emails = fields.get("emailAddress", [])
    if kind == "Bounce":
        bounce_type = (fields.get("bounceType") or [""])[0]
        statuses = fields.get("status", [])
        recipients = [{"emailAddress": email, "status": statuses[0] if statuses else ""} for email in emails]
        return {"notificationType": kind, "bounce": {"bounceType": bounce_type, "bouncedRecipients": recipients}}
    if kind == "Complaint":
        feedback_type = (fields.get("complaintFeedbackType") or ["abuse"])[0]
        recipients = [{"emailAddress": email} for email in emails]
        return {
            "notificationType": kind,
            "complaint": {"complainedRecipients": recipients, "complaintFeedbackType": feedback_type},
        }
    return None


def _readable_text(message: EmailMessage) -> str:
    """The message's text part; for a multipart whose boundary never comes (so it has no parts), its body."""
    text = body_text(message)
    if text is None and isinstance(message.get_payload(), str):
        text = part_text(message)
    return text or ""


@dataclass(frozen=True)
class _Text:
    """A message's readable text, split where a plain-text bounce starts quoting the original."""

    notice: str  # the human-readable notice
    quoted: str  # what follows the marker: the returned message, or its header


def _split_text(message: EmailMessage) -> _Text:
    lines = list(_lines(_readable_text(message)))
    cut = next((n for n, line in enumerate(lines) if n and _ORIGINAL_COPY.match(line)), len(lines))
    # The marker line is part of the quote when it is its first header ("Received: from ...").
    start = cut if cut < len(lines) and _HEADER_LINE.match(lines[cut]) else cut + 1
    return _Text("\n".join(lines[:cut]), "\n".join(lines[start:]).lstrip("\n"))


def _plain_text_recipients(notice: str, innocent: set[str], correlated: set[str]) -> list[tuple[str, str]]:
    """(address, the lines that follow it up to the next address) for each failed recipient named in the notice.

    Addresses where notices put failed recipients (_RECIPIENT_LINE) are taken when there are any;
    only without them, an address on a line stating a failure or one the returned message was
    addressed to (`correlated`). `innocent` addresses (senders, list addresses) are never taken.
    """
    placed = _addresses_by_line(notice, innocent, _placed_recipient)
    stated = partial(_failed_address, innocent=innocent, correlated=correlated)
    return placed or _addresses_by_line(notice, innocent, stated)


def _placed_recipient(line: str, before: str) -> str:
    match = _RECIPIENT_LINE.match(line)
    return next((value for value in match.groups() if value), "") if match else ""


def _failed_address(line: str, before: str, *, innocent: set[str], correlated: set[str]) -> str:
    """The first address on `line` that is not `innocent` ("your message from <sender> to <rcpt>") if
    the line states a failure, the line `before` it (the last that was not blank) introduces failed
    recipients ("did not reach the following recipient(s):"), or the returned message went to it."""
    if _NOT_A_RECIPIENT_LINE.match(line):
        return ""
    candidates = (m.group(0) for m in _ADDRESS.finditer(line) if m.group(0).rstrip(".-").lower() not in innocent)
    address = next(candidates, "")
    if not address:
        return ""
    introduced = before.rstrip().endswith(":") and (_failure_shown(before) or _FAILURE_WORDS.search(before))
    stated = introduced or _failure_shown(line) or _FAILURE_WORDS.search(line)
    return address if stated or address.rstrip(".-").lower() in correlated else ""


def _addresses_by_line(notice: str, innocent: set[str], find: Callable[[str, str], str]) -> list[tuple[str, str]]:
    found: dict[str, list[str]] = {}
    current = before = ""
    alternative_follows = False  # a phrase like "please use the new address:" ended the previous line
    for line in notice.split("\n"):
        if not line.strip():
            alternative_follows = False
            if current:
                found[current].append(line)
            continue
        address = find(line, before)
        announces = line.rstrip(" \t:.")[-12:].lower().endswith(_PHRASE_ENDS)
        said = _NOT_FAILED_AFTER.search(line) if address or announces else None
        if said and line.find(address) > said.start():  # "... please use <address> instead"
            address = ""
        address = address.rstrip(".-").lower()
        if alternative_follows and address:  # the alternative itself, on the line after the phrase
            address, alternative_follows = "", False
        before = line
        alternative_follows = alternative_follows or bool(said and not _ADDRESS.search(line, said.start()))
        if address and address not in innocent and not address.startswith("mailer-daemon@") and "." in address[1:]:
            current = address
            found.setdefault(current, []).append(line)
        elif current:
            found[current].append(line)
    return [(address, "\n".join(lines)) for address, lines in found.items()]


def _plain_text_outcome(notice: str, evidence: str) -> tuple[ReportedOutcome, str]:
    """The outcome a plain-text notice gives one recipient: its status code first, then the words."""
    status = _status_in(_first_match_line(_ENHANCED_STATUS, evidence)) or _status_in(
        _first_match_line(_ENHANCED_STATUS, notice)
    )
    reply = _SMTP_REPLY.search(_first_match_line(_SMTP_REPLY, evidence) or _first_match_line(_SMTP_REPLY, notice))
    code = status[:1] or (reply.group(1)[:1] if reply else "")
    still_trying = _DELAY_WORDS.search(notice) and not _PERMANENT_WORDS.search(notice)
    if code == "5":
        return ReportedOutcome.BOUNCE, status
    if still_trying:
        return ReportedOutcome.DELAY, status
    if code == "4" or _SOFT_WORDS.search(evidence) or _SOFT_WORDS.search(notice):
        return ReportedOutcome.SOFT_BOUNCE, status
    return ReportedOutcome.BOUNCE, status


def _first_match_line(pattern: re.Pattern[str], text: str) -> str:
    for line in text.split("\n"):
        if pattern.search(line):
            return line
    return ""


def _plain_text_bounce(message: EmailMessage, text: _Text) -> Report:
    """Plain-text bounces (qmail, Exim, Sendmail, Exchange...): recipients and codes read from the notice.

    A notice that shows a failure but names no recipient (or only the daemon itself) is about the
    original's recipient when the returned copy names exactly one, else about an unnamed one.
    """
    # A report whose parts were not recognised (a broken boundary, a mislabelled part) may still
    # carry the RFC 3464 per-recipient fields in its text.
    fields = _dsn_fields_recipients(_fields(_readable_text(message)))
    if fields:
        return Report(fields, _original_message_id(message))
    notice = text.notice
    returned = _returned_headers(message, text.quoted)
    # Exim's and Google's X-Failed-Recipients lists exactly the failed recipients: the notice only
    # adds each one's evidence.
    listed = addresses(message, "X-Failed-Recipients")
    lists = _list_addresses(message) | (_list_addresses(returned) if returned is not None else set())
    recipients_of_returned = set(addresses(returned, "To", "Cc", "Bcc")) - lists if returned is not None else set()
    # Who sent the report or the returned message did not fail, unless they also were its recipient
    # (someone who mailed themselves).
    senders = set(addresses(message, "From", "To", "Cc", "Reply-To", "Return-Path", "Sender"))
    if returned is not None:
        senders |= set(addresses(returned, "From", "Sender", "Reply-To", "Return-Path"))
    innocent = (senders - recipients_of_returned - set(listed)) | lists
    failed = _plain_text_recipients(notice, innocent, recipients_of_returned)
    if listed:
        evidence = dict(failed)
        named = [(address, evidence.get(address, notice)) for address in dict.fromkeys(listed)]
    else:
        named = failed
    if not named and _failure_shown(notice):
        to = sorted(recipients_of_returned - innocent)
        named = [(to[0] if len(to) == 1 else "", notice)]
    recipients = []
    for address, said in named:
        outcome, status = _plain_text_outcome(notice, said)
        diagnostic_line = _first_match_line(_ENHANCED_STATUS, said) or _first_match_line(_SMTP_REPLY, said)
        recipients.append(RecipientReport(address, outcome, status, diagnostic_line.strip()[:HEADER_LIMIT]))
    return Report(recipients, _original_message_id(message)) if recipients else NOT_A_REPORT


def _returned_headers(message: EmailMessage, quoted: str) -> EmailMessage | None:
    """The header of the message the report returns: attached, as a headers part, or quoted after the notice."""
    embedded = _embedded_message(message)
    if embedded is not None:
        return embedded
    part = _first_part(message, "text/rfc822-headers", "message/global-headers")
    text = (part_text(part) or "") if part is not None else quoted
    if not text.strip():
        return None
    try:
        return parse_bytes(text[:NOTICE_LIMIT].encode("utf-8", "replace"))
    except UnparsableMessage:
        return None


def _list_addresses(message: EmailMessage) -> set[str]:
    """Addresses of a mailing list (RFC 2369, RFC 2919): mail to them reaches members, not one failed mailbox."""
    found = set()
    for name in _LIST_HEADERS:
        for value in message.get_all(name, []):
            found |= {address.lower() for address in _ADDRESS.findall(decode_header_value(value)[:HEADER_LIMIT])}
    return found


def _failure_shown(notice: str) -> bool:
    return any(pattern.search(notice) for pattern in (_ENHANCED_STATUS, _SMTP_REPLY, _PERMANENT_WORDS, _SOFT_WORDS))


def _from_mail_system(message: EmailMessage) -> bool:
    return bool(_DAEMON.search(header(message, "From")[:HEADER_LIMIT])) or bool(message.get("X-Failed-Recipients"))


def _is_auto_reply(message: EmailMessage, text: _Text) -> bool:
    """RFC 3834 and its older conventions: a vacation notice, an auto-responder, a challenge-response request.

    Mail systems write `Auto-Submitted: auto-replied` on bounces too, so from them it only counts with
    a vacation notice's wording and without what every bounce carries (the failed recipients' list or
    the returned message); the auto-responders' own headers and subjects count whoever sends them.
    """
    auto_replied = header(message, "Auto-Submitted").lower().startswith("auto-replied")
    precedence = header(message, "Precedence").lower()
    return (
        (auto_replied and (not _from_mail_system(message) or _is_vacation_notice(message, text)))
        or any(message.get(name) for name in ("X-Autoreply", "X-Autorespond", "X-Autoresponder", "X-Vacation"))
        or precedence == "auto_reply"
        or bool(_AUTO_REPLY_SUBJECT.search(header(message, "Subject")[:HEADER_LIMIT]))
        or _is_challenge(message, text.notice)
    )


def _is_vacation_notice(message: EmailMessage, text: _Text) -> bool:
    returned = _first_part(message, "message/rfc822", "message/global", "text/rfc822-headers", "message/global-headers")
    if returned is not None or text.quoted.strip() or message.get("X-Failed-Recipients"):
        return False
    return bool(_VACATION_WORDS.search(text.notice[:CHALLENGE_LIMIT]))


def _is_challenge(message: EmailMessage, notice: str) -> bool:
    """A challenge-response or whitelist request: its system's headers, sender, subject, or (without an
    SMTP or enhanced status code when it comes from a mail system) its wording."""
    if any(name.lower().startswith(_CHALLENGE_HEADER_PREFIXES) for name in message):
        return True
    if header(message, "X-Delivery-Agent").upper().startswith("TMDA"):
        return True
    if _CHALLENGE_SENDER.search(header(message, "From")[:HEADER_LIMIT]):
        return True
    subject = header(message, "Subject")[:HEADER_LIMIT]
    # A bounce echoes the original's subject ("Undeliverable: Please confirm your email address").
    echoed = _from_mail_system(message) and _BOUNCE_SUBJECT.search(subject)
    if _CHALLENGE_SUBJECT.search(subject) and not echoed:
        return True
    notice = notice[:CHALLENGE_LIMIT]
    if not _CHALLENGE_WORDS.search(notice):
        return False
    return not _from_mail_system(message) or not (_ENHANCED_STATUS.search(notice) or _SMTP_REPLY.search(notice))


def classify(raw: bytes) -> Report:
    """What a message sent back to us reports; `kind == "none"` when it is not a report we can act on."""
    try:
        return classify_message(parse_bytes(raw))
    except UnparsableMessage:
        return NOT_A_REPORT


def classify_message(message: EmailMessage) -> Report:
    """`classify` of a message already parsed (the inbound server parses each message once)."""
    report_type = str(message.get_param("report-type", "", header="content-type") or "").lower()

    if report_type == "feedback-report" or _first_part(message, "message/feedback-report") is not None:
        return _complaint(message)
    vendor = _vendor_complaint(message) or _ses_notification(message)
    if vendor is not None:
        return vendor

    status_part = _first_part(message, "message/delivery-status", "message/global-delivery-status")
    if status_part is not None:
        recipients = _dsn_recipients(status_part)
        if recipients is not None:
            return Report(recipients, _original_message_id(message)) if recipients else NOT_A_REPORT

    text = _split_text(message)
    if report_type in {"delivery-status", "global-delivery-status"}:
        return _plain_text_bounce(message, text)
    if _is_auto_reply(message, text):
        return NOT_A_REPORT
    if _from_mail_system(message) or _BOUNCE_SUBJECT.search(header(message, "Subject")[:HEADER_LIMIT]):
        return _plain_text_bounce(message, text)
    return NOT_A_REPORT

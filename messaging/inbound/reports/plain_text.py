"""Plain-text bounces (Postfix, Exim, qmail, Sendmail, Exchange...): recipients and codes read from the notice.

Only failed recipients are named: never the report's own sender or recipient, the returned
message's sender or a list address (unless the returned message was also addressed to it), nor an
address the prose offers after "please use", "instead", "forwarded to", "expanded from"...
"""

import re
from collections.abc import Callable
from email.message import Message as EmailMessage
from functools import partial

from messaging.inbound.reports.addresses import ADDRESS, DOMAIN, LOCAL_PART, list_addresses
from messaging.inbound.reports.dsn import dsn_fields_recipients
from messaging.inbound.reports.reading import (
    HEADER_LIMIT,
    NOTICE_LIMIT,
    Text,
    embedded_message,
    field_blocks,
    first_part,
    original_message_id,
    readable_text,
)
from messaging.inbound.reports.results import NOT_A_REPORT, RecipientReport, Report, ReportedOutcome
from messaging.inbound.reports.status_codes import ENHANCED_STATUS, SMTP_REPLY, status_in
from messaging.rfc5322.parsing import UnparsableMessage, addresses, parse_bytes, part_text

# Where notices name a failed recipient: the address alone on its line (Exim, Exchange), "<rcpt>:"
# (Postfix, qmail), "rcpt... reason" (Sendmail), a labelled field, or an SMTP RCPT command.
_RECIPIENT_LINE = re.compile(
    rf"^[ \t>]*(?:(?:in|out)[ \t]*:[ \t]*)?(?:[45]\d\d[ \t-]{{1,9}})?(?:"
    rf"<?(?P<alone>{LOCAL_PART}@{DOMAIN})>?[ \t]*[:.,;]?[ \t]*$"
    # Postfix: "<member@example.net> (expanded from <list@example.org>): host ... said: 550 ..."
    rf"|<(?P<colon>{LOCAL_PART}@{DOMAIN})>[ \t]*(?:\(expanded from [^()]{{0,300}}\)[ \t]*)?:"
    rf"|<?(?P<reason>{LOCAL_PART}@{DOMAIN})>?(?:\.\.\.|:)[ \t]"
    rf"|(?:rcpt to|(?:failed |original |final )?recipient(?: address)?|address|to)[ \t]*:[ \t]*(?:rfc822;[ \t]*)?"
    rf"<?(?P<field>{LOCAL_PART}@{DOMAIN}))",
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
# A line that states a failure in words (codes are ENHANCED_STATUS and SMTP_REPLY).
_FAILURE_WORDS = re.compile(
    r"fail|undeliver|(not|n'?t) (be |been )?deliver|did not reach|following (recipient|address)|aborted"
    r"|could(n'?t| not) (be )?deliver|unable to deliver|reject|refused|unknown|no such|invalid|does(n'?t| not) exist"
    r"|bounced|unavailable|not found|disabled|inactive|over ?quota|mailbox (is )?full",
    re.IGNORECASE,
)
_DELAY_WORDS = re.compile(
    r"not yet been delivered|delivery (is |has been )?delayed|will (continue|keep|retry|try)|still trying"
    r"|retry(ing)? (until|for)|warning: message|delivery attempts will continue|delayed",
    re.IGNORECASE,
)


def plain_text_bounce(message: EmailMessage, text: Text) -> Report:
    """A plain-text bounce's report: one entry per failed recipient the notice names, with its code."""
    # A report whose parts were not recognised (a broken boundary, a mislabelled part) may still
    # carry the RFC 3464 per-recipient fields in its text.
    fields = dsn_fields_recipients(field_blocks(readable_text(message)))
    if fields:
        return Report(fields, original_message_id(message))
    recipients = [_recipient_report(text.notice, address, said) for address, said in _named_recipients(message, text)]
    return Report(recipients, original_message_id(message)) if recipients else NOT_A_REPORT


def _named_recipients(message: EmailMessage, text: Text) -> list[tuple[str, str]]:
    """(address, what the notice says of it) for each failed recipient.

    A notice that shows a failure but names no recipient (or only the daemon itself) is about the
    original's recipient when the returned copy names exactly one, else about an unnamed one.
    """
    notice = text.notice
    returned = _returned_headers(message, text.quoted)
    # Exim's and Google's X-Failed-Recipients lists exactly the failed recipients: the notice only
    # adds each one's evidence.
    listed = addresses(message, "X-Failed-Recipients")
    innocent, recipients_of_returned = _innocent_addresses(message, returned, listed)
    failed = _plain_text_recipients(notice, innocent, recipients_of_returned)
    if listed:
        evidence = dict(failed)
        return [(address, evidence.get(address, notice)) for address in dict.fromkeys(listed)]
    if not failed and _failure_shown(notice):
        to = sorted(recipients_of_returned - innocent)
        return [(to[0] if len(to) == 1 else "", notice)]
    return failed


def _innocent_addresses(
    message: EmailMessage, returned: EmailMessage | None, listed: list[str]
) -> tuple[set[str], set[str]]:
    """(addresses that did not fail, the returned message's recipients other than lists).

    Who sent the report or the returned message did not fail, unless they also were its recipient
    (someone who mailed themselves); nor did a list address.
    """
    lists = list_addresses(message)
    senders = set(addresses(message, "From", "To", "Cc", "Reply-To", "Return-Path", "Sender"))
    recipients_of_returned: set[str] = set()
    if returned is not None:
        lists |= list_addresses(returned)
        recipients_of_returned = set(addresses(returned, "To", "Cc", "Bcc")) - lists
        senders |= set(addresses(returned, "From", "Sender", "Reply-To", "Return-Path"))
    return (senders - recipients_of_returned - set(listed)) | lists, recipients_of_returned


def _recipient_report(notice: str, address: str, said: str) -> RecipientReport:
    outcome, status = _plain_text_outcome(notice, said)
    diagnostic_line = _first_match_line(ENHANCED_STATUS, said) or _first_match_line(SMTP_REPLY, said)
    # Without a reply line, what the notice says of the address is the diagnostic: the refusal classifier
    # (messaging/refusals.py) reads its words ("no mailbox here by that name", "over quota").
    diagnostic = diagnostic_line.strip() or " ".join(said[:HEADER_LIMIT].split())
    return RecipientReport(address, outcome, status, diagnostic[:HEADER_LIMIT])


def _returned_headers(message: EmailMessage, quoted: str) -> EmailMessage | None:
    """The header of the message the report returns: attached, as a headers part, or quoted after the notice."""
    embedded = embedded_message(message)
    if embedded is not None:
        return embedded
    part = first_part(message, "text/rfc822-headers", "message/global-headers")
    text = (part_text(part) or "") if part is not None else quoted
    if not text.strip():
        return None
    try:
        return parse_bytes(text[:NOTICE_LIMIT].encode("utf-8", "replace"))
    except UnparsableMessage:
        return None


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
    candidates = (m.group(0) for m in ADDRESS.finditer(line) if m.group(0).rstrip(".-").lower() not in innocent)
    address = next(candidates, "")
    if not address:
        return ""
    return address if _states_failure(line, before) or address.rstrip(".-").lower() in correlated else ""


def _states_failure(line: str, before: str) -> bool:
    """The line shows a failure, or the line before it introduces failed recipients ("... recipient(s):")."""
    introduced = before.rstrip().endswith(":") and (_failure_shown(before) or bool(_FAILURE_WORDS.search(before)))
    return introduced or _failure_shown(line) or bool(_FAILURE_WORDS.search(line))


def _addresses_by_line(notice: str, innocent: set[str], find: Callable[[str, str], str]) -> list[tuple[str, str]]:
    found: dict[str, list[str]] = {}
    current = before = ""
    alternative_follows = False  # a phrase like "please use the new address:" ended the previous line
    for line in notice.split("\n"):
        address = ""
        if line.strip():
            address, said = _unless_offered(line, find(line, before))
            if alternative_follows and address:  # the alternative itself, on the line after the phrase
                address, alternative_follows = "", False
            before = line
            alternative_follows = alternative_follows or bool(said and not ADDRESS.search(line, said.start()))
        else:
            alternative_follows = False
        if _may_have_failed(address, innocent):
            current = address
            found.setdefault(current, [])
        if current:
            found[current].append(line)
    return [(address, "\n".join(lines)) for address, lines in found.items()]


def _may_have_failed(address: str, innocent: set[str]) -> bool:
    """Whether a notice's line may name `address` as failed: not innocent, not the daemon, a dot past its start."""
    return bool(address) and address not in innocent and not address.startswith("mailer-daemon@") and "." in address[1:]


def _unless_offered(line: str, address: str) -> tuple[str, re.Match[str] | None]:
    """(`address` lower-cased, or "" when the line offers it as an alternative; the phrase that offers one)."""
    announces = line.rstrip(" \t:.")[-12:].lower().endswith(_PHRASE_ENDS)
    said = _NOT_FAILED_AFTER.search(line) if address or announces else None
    if said and line.find(address) > said.start():  # "... please use <address> instead"
        address = ""
    return address.rstrip(".-").lower(), said


def _plain_text_outcome(notice: str, evidence: str) -> tuple[ReportedOutcome, str]:
    """The outcome a plain-text notice gives one recipient: its status code first, then the words."""
    status, code = _status_and_class(notice, evidence)
    if code == "5":
        return ReportedOutcome.BOUNCE, status
    if _DELAY_WORDS.search(notice) and not _PERMANENT_WORDS.search(notice):
        return ReportedOutcome.DELAY, status
    if code == "4" or _SOFT_WORDS.search(evidence) or _SOFT_WORDS.search(notice):
        return ReportedOutcome.SOFT_BOUNCE, status
    return ReportedOutcome.BOUNCE, status


def _status_and_class(notice: str, evidence: str) -> tuple[str, str]:
    """(the enhanced status, the failure class "4" or "5" it or the SMTP reply gives), the recipient's lines first."""
    status = status_in(_first_match_line(ENHANCED_STATUS, evidence)) or status_in(
        _first_match_line(ENHANCED_STATUS, notice)
    )
    reply = SMTP_REPLY.search(_first_match_line(SMTP_REPLY, evidence) or _first_match_line(SMTP_REPLY, notice))
    return status, status[:1] or (reply.group(1)[:1] if reply else "")


def _first_match_line(pattern: re.Pattern[str], text: str) -> str:
    for line in text.split("\n"):
        if pattern.search(line):
            return line
    return ""


def _failure_shown(notice: str) -> bool:
    return any(pattern.search(notice) for pattern in (ENHANCED_STATUS, SMTP_REPLY, _PERMANENT_WORDS, _SOFT_WORDS))

"""Classify mail sent back to us: delivery status notifications (bounces, delays) and complaints.

`classify(raw)` is pure (bytes in, a `Report` out) so that corpora of real reports can be run
against it. The rules come from the formats, in this order, one module each:

1. Complaints (`arf`): RFC 5965 ARF, Microsoft JMRP, Apple's unsubscribe; then JSON vendor
   notifications (`vendor`: Amazon SES through SNS email).
2. RFC 3464 DSNs and RFC 6533 global DSNs (`dsn`).
3. Auto-replies are not reports, whoever sends them (`auto_reply`): vacation notices, auto-responders,
   challenge-response and whitelist requests.
4. A plain-text bounce from a mailer daemon (or with a bounce subject or `X-Failed-Recipients`):
   the recipients and codes are read from the first lines of the notice (`plain_text`).

Every heuristic reads a bounded region (`reading`: NOTICE_LIMIT characters, lines cut at LINE_LIMIT)
with regexes free of nested quantifiers, so the cost is linear in the input whatever it holds.
Nothing here raises on malformed input. Callers import from this package only.
"""

from email.message import Message as EmailMessage

from messaging.inbound.reports.arf import arf_complaint, jmrp_or_apple_complaint
from messaging.inbound.reports.auto_reply import from_mail_system, has_bounce_subject, is_auto_reply
from messaging.inbound.reports.dsn import dsn_report
from messaging.inbound.reports.plain_text import plain_text_bounce
from messaging.inbound.reports.reading import first_part, split_text
from messaging.inbound.reports.results import NOT_A_REPORT, RecipientReport, Report, ReportedOutcome
from messaging.inbound.reports.vendor import ses_notification
from messaging.rfc5322.parsing import UnparsableMessage, parse_bytes

__all__ = ["NOT_A_REPORT", "RecipientReport", "Report", "ReportedOutcome", "classify", "classify_message"]


def classify(raw: bytes) -> Report:
    """What a message sent back to us reports; `kind == "none"` when it is not a report we can act on."""
    try:
        return classify_message(parse_bytes(raw))
    except UnparsableMessage:
        return NOT_A_REPORT


def classify_message(message: EmailMessage) -> Report:
    """`classify` of a message already parsed (the inbound server parses each message once)."""
    report_type = str(message.get_param("report-type", "", header="content-type") or "").lower()
    structured = _structured_report(message, report_type)
    if structured is not None:
        return structured
    text = split_text(message)
    if report_type in {"delivery-status", "global-delivery-status"}:
        return plain_text_bounce(message, text)
    if is_auto_reply(message, text):
        return NOT_A_REPORT
    if from_mail_system(message) or has_bounce_subject(message):
        return plain_text_bounce(message, text)
    return NOT_A_REPORT


def _structured_report(message: EmailMessage, report_type: str) -> Report | None:
    """The report of a part made to be read by machines (ARF, a vendor's notice, a DSN); None without one."""
    if report_type == "feedback-report" or first_part(message, "message/feedback-report") is not None:
        return arf_complaint(message)
    return jmrp_or_apple_complaint(message) or ses_notification(message) or dsn_report(message)

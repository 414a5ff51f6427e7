"""Complaints: RFC 5965 ARF (`message/feedback-report`), Microsoft JMRP and Apple's unsubscribe notices.

ARF gives one complaint per `Original-Rcpt-To` (a report may name several); JMRP attaches the
complained-about message with `X-HmXmrOriginalRecipient`; Apple sends `X-Apple-Unsubscribe: true`.
"""

from email.message import Message as EmailMessage

from messaging.inbound.reports.addresses import bare_address, list_addresses
from messaging.inbound.reports.reading import (
    Fields,
    embedded_message,
    first,
    original_message_id,
    quoted_headers,
    report_blocks,
)
from messaging.inbound.reports.results import NOT_A_REPORT, RecipientReport, Report, ReportedOutcome
from messaging.rfc5322.parsing import addresses, header

# ARF feedback types that are not complaints about our mail (RFC 6650 not-spam, RFC 6591 auth failures).
_NOT_COMPLAINTS = {"not-spam", "auth-failure"}


def arf_complaint(message: EmailMessage) -> Report:
    """RFC 5965: one complaint per Original-Rcpt-To of every feedback-report part."""
    reports = [part for part in message.walk() if part.get_content_type() == "message/feedback-report"]
    recipients = [recipient for part in reports for recipient in _feedback_report_complaints(part)]
    if not recipients and not reports:  # declared a feedback report but carries no report part
        recipients = [RecipientReport("", ReportedOutcome.COMPLAINT, feedback_type="abuse")]
    if not recipients:
        return NOT_A_REPORT
    if all(not recipient.address for recipient in recipients):
        recipients = _named_by_original(message, recipients)
    return Report(recipients, original_message_id(message), original_return_path(message))


def original_return_path(message: EmailMessage) -> str:
    """The Return-Path of the original the report quotes (a headers-only ARF keeps it when it removes the
    body and redacts the recipient), as a bare address; "" without one."""
    found = next((header(quoted, "Return-Path") for quoted in quoted_headers(message) if quoted.get("Return-Path")), "")
    return bare_address(found)


def _feedback_report_complaints(part: EmailMessage) -> list[RecipientReport]:
    """The complaints of one feedback-report part: one per recipient it names, or one unnamed."""
    fields: Fields = {}
    for block in report_blocks(part):
        for name, values in block.items():
            fields.setdefault(name, []).extend(values)
    feedback_type = (first(fields, "feedback-type") or "abuse").lower()
    if feedback_type in _NOT_COMPLAINTS:
        return []
    found = [bare_address(value) for value in fields.get("original-rcpt-to", []) + fields.get("removal-recipient", [])]
    return [
        RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type=feedback_type)
        for address in dict.fromkeys(found) or [""]
    ]


def _named_by_original(message: EmailMessage, redacted: list[RecipientReport]) -> list[RecipientReport]:
    """Redacted complaints name the returned message's one recipient, when it had exactly one."""
    embedded = embedded_message(message)
    if embedded is None:
        return redacted
    # A list address reaches many readers: it does not say who complained.
    lists = list_addresses(embedded)
    to = [address for address in addresses(embedded, "To") if address not in lists]
    if len(to) != 1:
        return redacted
    return [RecipientReport(to[0], r.outcome, feedback_type=r.feedback_type) for r in redacted[:1]]


def jmrp_or_apple_complaint(message: EmailMessage) -> Report | None:
    """Complaints outside ARF: Microsoft JMRP and Apple's unsubscribe notices; None when neither."""
    embedded = embedded_message(message)
    if embedded is not None and embedded.get("X-HmXmrOriginalRecipient"):
        address = bare_address(header(embedded, "X-HmXmrOriginalRecipient"))
        complaint = RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type="abuse")
        return Report([complaint], original_message_id(message))
    if header(message, "X-Apple-Unsubscribe").lower() == "true":
        to = addresses(message, "To")
        address = to[0] if len(to) == 1 else ""
        return Report([RecipientReport(address, ReportedOutcome.COMPLAINT, feedback_type="opt-out")])
    return None

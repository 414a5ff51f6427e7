"""JSON vendor notifications: Amazon SES bounce and complaint notifications delivered by SNS email."""

import json
import re
from email.message import Message as EmailMessage
from typing import Any

from messaging.inbound.reports.addresses import bare_address
from messaging.inbound.reports.reading import HEADER_LIMIT, NOTICE_LIMIT
from messaging.inbound.reports.results import NOT_A_REPORT, RecipientReport, Report, ReportedOutcome
from messaging.inbound.reports.status_codes import status_in
from messaging.rfc5322.parsing import body_text, header

# A field of a (possibly JSON-in-JSON, so backslash-escaped) SES notification.
_JSON_FIELD = re.compile(
    r'\\?"(notificationType|bounceType|emailAddress|status|complaintFeedbackType)\\?"\s{0,9}:\s{0,9}\\?"([^"\\]{0,320})'
)


def ses_notification(message: EmailMessage) -> Report | None:
    """The bounced or complaining recipients an SES notification names; None when the message is not one."""
    notification = _sns_notification(message)
    if notification is None:
        return None
    kind = str(notification.get("notificationType") or notification.get("eventType") or "").lower()
    recipients: list[RecipientReport] = []
    if kind == "bounce" and isinstance(notification.get("bounce"), dict):
        recipients = _bounced_recipients(notification["bounce"])
    elif kind == "complaint" and isinstance(notification.get("complaint"), dict):
        recipients = _complained_recipients(notification["complaint"])
    return Report(recipients) if recipients else NOT_A_REPORT


def _sns_notification(message: EmailMessage) -> dict | None:
    """The SES notification an SNS email carries, unwrapped from SNS's envelope when it has one."""
    if "@sns.amazonaws.com" not in header(message, "From")[:HEADER_LIMIT].lower():
        return None
    text = (body_text(message) or "")[:NOTICE_LIMIT]
    notification = _json_object(text[text.find("{") :]) if "{" in text else None
    if isinstance(notification, dict) and isinstance(notification.get("Message"), str):
        notification = _json_object(notification["Message"])
    return notification if isinstance(notification, dict) else None


def _bounced_recipients(bounce: dict[str, Any]) -> list[RecipientReport]:
    permanent = str(bounce.get("bounceType", "")).lower() == "permanent"
    outcome = ReportedOutcome.BOUNCE if permanent else ReportedOutcome.SOFT_BOUNCE
    return [
        RecipientReport(
            bare_address(str(entry.get("emailAddress", ""))),
            outcome,
            status_in(str(entry.get("status", ""))),
            str(entry.get("diagnosticCode", ""))[:HEADER_LIMIT],
        )
        for entry in _entries(bounce.get("bouncedRecipients"))
    ]


def _complained_recipients(complaint: dict[str, Any]) -> list[RecipientReport]:
    feedback_type = str(complaint.get("complaintFeedbackType") or "abuse").lower()
    return [
        RecipientReport(
            bare_address(str(entry.get("emailAddress", ""))), ReportedOutcome.COMPLAINT, feedback_type=feedback_type
        )
        for entry in _entries(complaint.get("complainedRecipients"))
    ]


def _json_object(text: str) -> dict | None:
    """The JSON object `text` starts with; SNS e-mail cuts long notifications, so a cut one is read
    field by field (RawDecoder stops at the first error, so only what precedes the cut is lost)."""
    try:
        decoded = json.JSONDecoder().raw_decode(text.strip())[0]
    except ValueError:
        return _cut_notification(text)
    return decoded if isinstance(decoded, dict) else None


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


def _entries(value: Any) -> list[dict[str, Any]]:
    """The objects of a recipients list; anything else (a forged notification's number or string) is none."""
    return [entry for entry in value if isinstance(entry, dict)] if isinstance(value, list) else []

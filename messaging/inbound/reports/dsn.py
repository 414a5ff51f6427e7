"""RFC 3464 delivery status notifications and RFC 6533 global ones (UTF-8 fields, `utf-8;` address types).

`Action: failed` (and the `failure`/`error`/`expired` variants real MTAs write) is final: with a
5.x.x status (RFC 3463 permanent) it is a hard `bounce`, with 4.x.x a `soft_bounce` (the relay gave
up on a temporary condition, e.g. 4.2.2 mailbox full). `delayed` is a `delay`.
"""

from email.message import Message as EmailMessage

from messaging.inbound.reports.addresses import bare_address
from messaging.inbound.reports.reading import (
    HEADER_LIMIT,
    LINE_LIMIT,
    Fields,
    first,
    first_part,
    original_message_id,
    report_blocks,
)
from messaging.inbound.reports.results import NOT_A_REPORT, RecipientReport, Report, ReportedOutcome
from messaging.inbound.reports.status_codes import SMTP_REPLY, status_in

_FINAL_ACTIONS = {"failed", "failure", "error", "expired", "undeliverable", "bounced", "bounce"}
_DELAY_ACTIONS = {"delayed", "delay", "deferred"}


def dsn_report(message: EmailMessage) -> Report | None:
    """The report of a message's delivery-status part; None without one, or when it names no recipient."""
    status_part = first_part(message, "message/delivery-status", "message/global-delivery-status")
    if status_part is None:
        return None
    recipients = dsn_fields_recipients(report_blocks(status_part))
    if recipients is None:
        return None
    return Report(recipients, original_message_id(message)) if recipients else NOT_A_REPORT


def dsn_fields_recipients(blocks: list[Fields]) -> list[RecipientReport] | None:
    """Failed and delayed recipients of RFC 3464 per-recipient fields; None when no block names a recipient."""
    recipients, named = [], False
    for block in blocks:
        address = bare_address(first(block, "original-recipient")) or bare_address(first(block, "final-recipient"))
        if not address:
            continue
        named = True
        diagnostic = first(block, "diagnostic-code")
        status = status_in(first(block, "status"))
        outcome = _outcome(first(block, "action"), status, diagnostic)
        if outcome is not None:
            recipients.append(RecipientReport(address, outcome, status, diagnostic[:HEADER_LIMIT]))
    return recipients if named else None


def _outcome(action_field: str, status: str, diagnostic: str) -> ReportedOutcome | None:
    """What one recipient's fields report; None for a success (delivered, relayed, expanded): nothing to act on."""
    action = (action_field.split() or [""])[0].lower().strip(".;:")
    if action in _FINAL_ACTIONS:
        return _final_outcome(status, diagnostic)
    if action in _DELAY_ACTIONS or (not action and status.startswith("4")):
        return ReportedOutcome.DELAY
    if not action and status.startswith("5"):
        return ReportedOutcome.BOUNCE
    return None


def _final_outcome(status: str, evidence: str) -> ReportedOutcome:
    """A final failure: hard when the status (or, lacking one, the SMTP reply) is permanent."""
    if status:
        return ReportedOutcome.BOUNCE if status.startswith("5") else ReportedOutcome.SOFT_BOUNCE
    reply = SMTP_REPLY.search(evidence[:LINE_LIMIT])
    return ReportedOutcome.SOFT_BOUNCE if reply and reply.group(1).startswith("4") else ReportedOutcome.BOUNCE

"""A message as the API shows it: the one wire form that GET /v1/messages, GET /v1/messages/{id} and
every webhook payload copy, so the API layer and the webhooks app agree without one importing the other;
and a suppression as /v1/suppressions shows it.

The API's MessageSerializer describes this shape in the OpenAPI document; a test holds the two equal.
"""

from datetime import UTC
from typing import Any

from messaging.models import Message, Suppression, SuppressionReason
from messaging.suppressions import REASON_WIRE


def iso_utc(moment: Any) -> str:
    """ISO 8601 in UTC with a `Z`, as DRF's DateTimeField writes it under TIME_ZONE = "UTC"."""
    text = moment.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def message_wire(message: Message, *, include_text: bool) -> dict[str, Any]:
    """List items and webhook payloads carry `text: null` (`include_text` False); a single get carries the body."""
    return {
        "id": message.public_id,
        "domain_id": message.domain.public_id,
        "direction": message.direction,
        "from": message.from_address,
        "to": [str(mailbox) for mailbox in message.to],
        "subject": message.subject,
        "status": message.status,
        "created_at": iso_utc(message.created_at),
        "text": message.text if include_text else None,
    }


def suppression_wire(entry: Suppression) -> dict[str, Any]:
    """A suppression as /v1/suppressions shows it."""
    source = entry.source_message
    return {
        "email": entry.address,
        "reason": REASON_WIRE[SuppressionReason(entry.reason)],
        "created_at": iso_utc(entry.created_at),
        "expires_at": iso_utc(entry.expires_at) if entry.expires_at is not None else None,
        "message_id": source.public_id if source is not None else None,
        "detail": entry.detail,
    }

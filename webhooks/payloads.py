"""The JSON body of each event (docs/webhooks.md, OpenAPI `webhooks`).

`{"type", "id", "created_at", "test", "data"}`, where `data` is the message as GET /v1/messages/{id}
shows it (text null) plus the event's own fields. Built once, when the event is fanned out, so
every retry sends the same bytes and the message's status is the one it had then.
"""

import json
import re
from typing import Any

from django.urls import reverse

from messaging.inbound.parsing import (
    addresses,
    attachment_parts,
    decode_header_value,
    header,
    parse_bytes,
    part_bytes,
    part_text,
    storable,
)
from messaging.models import EventType as MessageEventType
from messaging.models import Message, MessageEvent, Status
from messaging.wire import message_wire
from webhooks.links import link_sign
from webhooks.models import EventType

# Each recorded event type of a message, as applications see it; events not listed are not published.
PUBLIC_TYPE: dict[str, EventType] = {
    MessageEventType.ACCEPTED: EventType.ACCEPTED,
    MessageEventType.DELIVERED: EventType.DELIVERED,
    MessageEventType.DEFERRED: EventType.DELAYED,
    MessageEventType.DELAYED: EventType.DELAYED,
    MessageEventType.RECIPIENT_REJECTED: EventType.BOUNCED,
    MessageEventType.BOUNCED: EventType.BOUNCED,
    MessageEventType.SOFT_BOUNCED: EventType.BOUNCED,
    MessageEventType.COMPLAINED: EventType.COMPLAINED,
    MessageEventType.FAILED: EventType.FAILED,
    MessageEventType.SUPPRESSED: EventType.SUPPRESSED,
    MessageEventType.RECEIVED: EventType.RECEIVED,
}

# The status an event leaves its message in. Fan-out runs after the fact (the message may be
# delivered by the time its `email.accepted` goes out), so `data.status` is the status as of the
# event; events that change no status by themselves (delays, one recipient's bounce: the message
# is `bounced` only once every recipient is) show the status at fan-out.
_STATUS_AFTER: dict[str, str] = {
    MessageEventType.ACCEPTED: Status.ACCEPTED,
    MessageEventType.DELIVERED: Status.DELIVERED,
    MessageEventType.COMPLAINED: Status.COMPLAINED,
    MessageEventType.FAILED: Status.FAILED,
    MessageEventType.RECEIVED: Status.RECEIVED,
}

# An SMTP reply ("550 5.1.1 user unknown") or a DSN's status and diagnostic ("5.1.1 smtp; 550 ...").
# Anchored, no nested quantifiers: linear in the detail.
_SMTP_REPLY = re.compile(r"([245]\d\d)[ -]+(?:([245]\.\d{1,3}\.\d{1,3})\b)?")
_DSN_STATUS = re.compile(r"([245]\.\d{1,3}\.\d{1,3})\b\s*")
# A complaint's detail: the ARF Feedback-Type, as "feedback-type: abuse" or bare.
_FEEDBACK_TYPE = re.compile(r"(?:feedback-type:\s*)?([\w-]+)", re.IGNORECASE)


def event_fields(event: MessageEvent) -> dict[str, Any]:
    """The event's own fields in `data`: recipient, bounce_type, status_code, diagnostic,
    smtp_response, feedback_type, as they apply. Derived from what the event row records; the
    one place to change when the row records more."""
    public = PUBLIC_TYPE[event.type]
    fields: dict[str, Any] = {}
    if event.recipient:
        fields["recipient"] = event.recipient
    detail = event.detail
    if public == EventType.COMPLAINED:
        feedback = _FEEDBACK_TYPE.match(detail)
        feedback_type = event.feedback_type or (feedback.group(1).lower() if feedback else "")
        if feedback_type:
            fields["feedback_type"] = feedback_type
        return fields
    if public in (EventType.ACCEPTED, EventType.RECEIVED):
        return fields
    reply = _SMTP_REPLY.match(detail)
    dsn = None if reply else _DSN_STATUS.match(detail)
    if reply:
        fields["smtp_response"] = detail
        if reply.group(2):
            fields["status_code"] = reply.group(2)
    elif dsn:
        fields["status_code"] = dsn.group(1)
        fields["diagnostic"] = detail[dsn.end() :]
    elif detail:
        fields["diagnostic"] = detail
    if event.status_code:  # recorded from a report's own Status field (messaging/inbound)
        fields["status_code"] = event.status_code
    if public == EventType.BOUNCED:
        code = fields.get("status_code") or (reply.group(1) if reply else "5")
        soft = event.type == MessageEventType.SOFT_BOUNCED or code.startswith("4")
        fields["bounce_type"] = "soft" if soft else "hard"
    return fields


def _received_fields(message: Message) -> dict[str, Any]:
    """What an application needs to handle received mail without fetching it: the content, every
    header, and each attachment's metadata with a signed, expiring link to its bytes."""
    parsed = parse_bytes(bytes(message.raw or b""))
    html_parts = [part for part in parsed.walk() if part.get_content_type() == "text/html" and not part.get_filename()]
    html = next((text for text in map(part_text, html_parts) if text is not None), None)
    attachments = []
    for index, part in enumerate(attachment_parts(parsed)):
        path = reverse("message-attachment", kwargs={"id": message.public_id, "index": index})
        attachments.append(
            {
                "filename": storable(decode_header_value(part.get_filename())) or None,
                "content_type": part.get_content_type(),
                "size": len(part_bytes(part)),
                "content_id": storable(header(part, "Content-ID")).strip("<>") or None,
                "url": link_sign(path),
            }
        )
    return {
        "from": message.from_address,
        "to": message.to,
        "cc": addresses(parsed, "Cc"),
        "subject": message.subject,
        "text": message.text,
        "html": storable(html) if html is not None else None,
        "headers": [{"name": name, "value": storable(decode_header_value(value))} for name, value in parsed.items()],
        "attachments": attachments,
        "raw_url": link_sign(reverse("message-raw", kwargs={"id": message.public_id})),
    }


def messages_data(messages: list[Message]) -> dict[int, dict[str, Any]]:
    """Each message as the API shows it (text null), by primary key."""
    return {message.pk: message_wire(message, include_text=False) for message in messages}


def event_payload(*, event: MessageEvent, message: Message, message_data: dict[str, Any], event_id: str) -> str:
    """The exact JSON body of `event` of `message`, whose API form (`messages_data`) is `message_data`."""
    public = PUBLIC_TYPE[event.type]
    data = dict(message_data)
    data["status"] = _STATUS_AFTER.get(event.type, data["status"])
    if public == EventType.RECEIVED:
        data |= _received_fields(message)
    data |= event_fields(event)
    body = {
        "type": public.value,
        "id": event_id,
        "created_at": event.created_at.isoformat().replace("+00:00", "Z"),
        "test": message.is_test,
        "data": data,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

"""The JSON body of each event (docs/webhooks.md, OpenAPI `webhooks`).

`{"type", "id", "created_at", "test", "data"}`, where `data` is the message as GET /v1/messages/{id}
shows it (text null) plus the event's own fields. Built once, when the event is fanned out, so
every retry sends the same bytes and the message's status is the one it had then.
"""

import json
from typing import Any

from django.urls import reverse

from messaging.models import DmarcRecord, DmarcReport, Message, MessageEvent, Status
from messaging.models import EventType as MessageEventType
from messaging.rfc5322.parsing import (
    addresses,
    attachment_parts,
    decode_header_value,
    header,
    parse_bytes,
    part_bytes,
    part_text,
    storable,
)
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

# The public types of a message's events, in the order the documents list them (GET /v1/events' `type`).
MESSAGE_EVENT_TYPES: list[str] = list(dict.fromkeys(public.value for public in PUBLIC_TYPE.values()))


def recorded_types(public_types: list[str]) -> list[str]:
    """The recorded event types that are published as any of `public_types` (all published ones if empty)."""
    return [recorded for recorded, public in PUBLIC_TYPE.items() if not public_types or public in public_types]


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

# Dispatch's own account of a retry, of giving up or of a skipped recipient ("attempt 2: 451 ..."):
# published whole as the diagnostic. The reply behind it, if any, is in the row's fields for the console.
_NOTES = {MessageEventType.DEFERRED, MessageEventType.FAILED, MessageEventType.SUPPRESSED}
# The events that may carry a reason and cause (messaging/refusals.py): a receiver deferred or refused.
_FAILURES = {EventType.DELAYED, EventType.BOUNCED, EventType.FAILED}


def event_fields(event: MessageEvent) -> dict[str, Any]:
    """The event's own fields in `data`: recipient, bounce_type, status_code, diagnostic,
    smtp_response, feedback_type, reason, cause and fix_check, as they apply. Copied from what the event row
    records as data (the writers fill the fields: messaging/outbound/dispatch.py, its sandbox, messaging/inbound)."""
    public = PUBLIC_TYPE[event.type]
    fields: dict[str, Any] = {}
    if event.recipient:
        fields["recipient"] = event.recipient
    if public == EventType.COMPLAINED:
        if event.feedback_type:
            fields["feedback_type"] = event.feedback_type
        return fields
    if public in (EventType.ACCEPTED, EventType.RECEIVED):
        return fields
    if public in _FAILURES and event.reason:
        fields["reason"] = event.reason
    if public in _FAILURES and event.cause:
        fields["cause"] = event.cause
        if event.fix_check:
            fields["fix_check"] = event.fix_check
    if event.type in _NOTES:
        if event.detail:
            fields["diagnostic"] = event.detail
        return fields
    if event.smtp_code is not None:
        # The reply itself, as the relay (or the sandbox) gave it: the detail adds the cause to it.
        fields["smtp_response"] = f"{event.smtp_code} {event.diagnostic}".strip()
    elif event.diagnostic:
        fields["diagnostic"] = event.diagnostic
    if event.enhanced_status:
        fields["status_code"] = event.enhanced_status
    if event.bounce_type:
        fields["bounce_type"] = event.bounce_type
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


def event_body(*, event: MessageEvent, message: Message, message_data: dict[str, Any]) -> dict[str, Any]:
    """The body of `event` of `message`, whose API form (`messages_data`) is `message_data`; its id is the
    event's public id, the webhook's `webhook-id`."""
    public = PUBLIC_TYPE[event.type]
    data = dict(message_data)
    data["status"] = _STATUS_AFTER.get(event.type, data["status"])
    if public == EventType.RECEIVED:
        data |= _received_fields(message)
    data |= event_fields(event)
    return {
        "type": public.value,
        "id": event.public_id,
        "created_at": _iso(event.created_at),
        "test": message.is_test,
        "data": data,
    }


def event_payload(*, event: MessageEvent, message: Message, message_data: dict[str, Any]) -> str:
    """The exact JSON body of `event` as a webhook sends it (event_body, serialised once)."""
    return json.dumps(
        event_body(event=event, message=message, message_data=message_data), ensure_ascii=False, separators=(",", ":")
    )


def event_bodies(events: list[MessageEvent]) -> list[dict[str, Any]]:
    """The bodies of published types among `events`, in their order, as GET /v1/events and
    GET /v1/messages/{id}/events show them: each exactly what its webhook carries (its `data.status` and a
    received message's links are as of now, not as of the fan-out)."""
    public = [event for event in events if event.type in PUBLIC_TYPE]
    # Bodies and raw source are read only for the few messages whose payload needs them.
    messages = (
        Message.objects.select_related("domain")
        .defer("text", "html", "raw")
        .in_bulk({event.message_id for event in public})
    )
    data = messages_data(list(messages.values()))
    return [
        event_body(event=event, message=messages[event.message_id], message_data=data[event.message_id])
        for event in public
    ]


def _iso(moment: Any) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def dmarc_report_payload(*, report: DmarcReport, records: list[DmarcRecord], event_id: str) -> str:
    """The body of `domain.dmarc_report`: the report's period and reporter, its counts of messages as
    dmarc_summary counts them, and each source's figures."""
    sources: dict[str, dict[str, int]] = {}
    for record in records:
        source = sources.setdefault(record.source_ip, {"messages": 0, "dmarc_pass": 0})
        source["messages"] += record.count
        source["dmarc_pass"] += record.count if record.dkim_aligned or record.spf_aligned else 0
    data = {
        "domain": report.domain.name,
        "org_name": report.org_name,
        "report_id": report.report_id,
        "authenticated": report.authenticated,
        "begin": _iso(report.begin),
        "end": _iso(report.end),
        "messages": sum(record.count for record in records),
        "dmarc_pass": sum(source["dmarc_pass"] for source in sources.values()),
        "dkim_aligned_pass": sum(record.count for record in records if record.dkim_aligned),
        "spf_aligned_pass": sum(record.count for record in records if record.spf_aligned),
        "sources": [{"source_ip": ip, **figures} for ip, figures in sources.items()],
    }
    body = {
        "type": EventType.DMARC_REPORT.value,
        "id": event_id,
        "created_at": _iso(report.created_at),
        "test": False,
        "data": data,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))

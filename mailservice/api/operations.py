"""The OpenAPI description of each /v1 operation (parameters, examples, the errors it can answer),
beside the schema's own helpers (openapi.py): the views in views.py take theirs by name
(`@operations.send`) and stay the code that answers the request.

Examples are values of the spec's shapes; each error list names the ErrorCode values the operation
can answer, and `error_responses` (openapi.py) turns them into the spec's error envelope.
"""

from django.conf import settings
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)

from mailservice.api.openapi import error_responses
from mailservice.api.serializers import (
    EventListSerializer,
    InlineSendRequestSerializer,
    MessageEventsSerializer,
    MessageListSerializer,
    MessageSerializer,
    SendBatchRequestSerializer,
    SendBatchResponseSerializer,
    SendResponseSerializer,
    SuppressionListSerializer,
    SuppressionPutSerializer,
    SuppressionSerializer,
    TemplateSendRequestSerializer,
)
from mailservice.errors import ErrorCode
from messaging.idempotency import HEADER as IDEMPOTENCY_HEADER
from messaging.models import Direction
from messaging.suppressions import MAX_API_DETAIL, REASON_OF_WIRE
from webhooks.payloads import MESSAGE_EVENT_TYPES

_E = ErrorCode
# Every operation can meet these: a wrong key, a key without the permission, the rate limit, a database outage.
_ANY_OPERATION = (_E.UNAUTHORIZED, _E.MISSING_PERMISSION, _E.RATE_LIMITED, _E.SERVICE_UNAVAILABLE)
_READ_MESSAGES = {_E.MISSING_PERMISSION: "This API key lacks the email.read permission"}
_INLINE_EXAMPLE = {
    "from": "Demo <hello@demo.example>",
    "to": "you@example.org",
    "subject": "Hi",
    "text": "It works.",
    "html": "<p>It works.</p>",
}
_TEMPLATE_EXAMPLE = {
    "from": "Demo <hello@demo.example>",
    "to": ["you@example.org"],
    "template": {"id": "welcome", "variables": {"name": "Ada"}},
}
_MESSAGE_EXAMPLE = {
    "id": "msg_2Qm4kT9xVb7Lp1Zc",
    "domain_id": "dom_8Hn3Rt6Yw2Kq",
    "direction": "sent",
    "from": "Demo <hello@demo.example>",
    "to": ["you@example.org"],
    "subject": "Hi",
    "status": "delivered",
    "created_at": "2026-11-23T13:45:12.345678Z",
}
_IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[ -~]+$"},
    OpenApiParameter.HEADER,
    description="Send at most once per key and domain within 24 hours: a retry with the same key "
    "and body gets the first response again (with `Idempotent-Replayed: true`). A test key's keys "
    "are apart from live keys': the same key used by both sends once in each",
)
# What a send can be refused with, a single one or a batch.
_SEND_ERRORS = (
    _E.VALIDATION_ERROR,
    _E.INVALID_JSON,
    _E.INVALID_CONTENT_TYPE,
    _E.DOMAIN_NOT_VERIFIED,
    _E.TEMPLATE_NOT_FOUND,
    _E.MISSING_TEMPLATE_VARIABLE,
    _E.SENDER_NOT_ALLOWED,
    _E.REQUEST_TOO_LARGE,
    _E.ALLOWANCE_EXHAUSTED,
    _E.SENDING_PAUSED,
    _E.IDEMPOTENCY_KEY_REUSED,
    _E.IDEMPOTENCY_KEY_IN_FLIGHT,
    *_ANY_OPERATION,
)
_BATCH_MESSAGES = {
    _E.VALIDATION_ERROR: "messages.3.to.0: must be an address like name@example.com or Name <name@example.com> "
    "(3 to 320 characters)",
    _E.TEMPLATE_NOT_FOUND: "messages.1.template.id: no template 'welcome' on this domain",
    _E.MISSING_TEMPLATE_VARIABLE: "messages.1.template.variables: no value for placeholder {{ name }}",
    _E.SENDER_NOT_ALLOWED: "messages.0.from: the sender must be on this key's domain (demo.example)",
    _E.REQUEST_TOO_LARGE: f"Request body is larger than {settings.MAILSERVICE_BATCH_MAX_BYTES} bytes",
}
_MESSAGE_ID = OpenApiParameter("id", {"type": "string", "minLength": 1, "maxLength": 256}, OpenApiParameter.PATH)
_LINK_MESSAGES = {
    _E.MISSING_PERMISSION: "This API key lacks the email.read permission",
    _E.FORBIDDEN: "token: this link has expired",
}
_LINK_TOKEN = OpenApiParameter(
    "token",
    {"type": "string", "minLength": 1, "maxLength": 200},
    required=True,
    description="The token of the link an `email.received` event carries (it expires)",
)

send = extend_schema(
    operation_id="send",
    parameters=[_IDEMPOTENCY_PARAMETER],
    request=PolymorphicProxySerializer(
        component_name="SendRequest",
        serializers=[InlineSendRequestSerializer, TemplateSendRequestSerializer],
        resource_type_field_name=None,
    ),
    summary="Send a message",
    description="Inline `subject` with `text` and/or `html`, or a published `template` with `variables`. "
    "A 200 means the message is stored as `accepted` and will be dispatched exactly once.",
    examples=[
        OpenApiExample("Inline content", value=_INLINE_EXAMPLE, request_only=True),
        OpenApiExample("Published template", value=_TEMPLATE_EXAMPLE, request_only=True),
    ],
    responses={
        200: OpenApiResponse(
            SendResponseSerializer,
            description="Accepted",
            examples=[
                OpenApiExample(
                    "Accepted",
                    value={"id": _MESSAGE_EXAMPLE["id"], "created_at": _MESSAGE_EXAMPLE["created_at"]},
                    response_only=True,
                )
            ],
        ),
        **error_responses(*_SEND_ERRORS),
    },
)

send_batch = extend_schema(
    operation_id="sendBatch",
    parameters=[_IDEMPOTENCY_PARAMETER],
    request=SendBatchRequestSerializer,
    summary="Send a batch of messages",
    description=f"1 to {settings.MAILSERVICE_BATCH_MAX} messages (`MAILSERVICE_BATCH_MAX`), each exactly as "
    "`POST /v1/send` takes it, inline or from a template; the body may be up to "
    f"{settings.MAILSERVICE_BATCH_MAX_BYTES} bytes (`MAILSERVICE_BATCH_MAX_BYTES`). All or nothing: any refusal "
    "is the one a single send would answer, naming the item (`messages.3.to.0: …`), and stores nothing; the "
    "allowance must hold every message. A 200 lists each message's id in the order of the items; every one is "
    "stored as `accepted` and will be dispatched exactly once, with its own events. An `Idempotency-Key` "
    "covers the whole batch. An addition to the spec's operations.",
    examples=[
        OpenApiExample(
            "Inline and template items",
            value={"messages": [_INLINE_EXAMPLE, _TEMPLATE_EXAMPLE]},
            request_only=True,
        )
    ],
    responses={
        200: OpenApiResponse(
            SendBatchResponseSerializer,
            description="Accepted, every message",
            examples=[
                OpenApiExample(
                    "Accepted",
                    value={
                        "data": [
                            {"id": _MESSAGE_EXAMPLE["id"], "created_at": _MESSAGE_EXAMPLE["created_at"]},
                            {"id": "msg_7Wd1pR5sNc3Hx8Qa", "created_at": "2026-11-23T13:45:12.346012Z"},
                        ]
                    },
                    response_only=True,
                )
            ],
        ),
        **error_responses(*_SEND_ERRORS, messages=_BATCH_MESSAGES),
    },
)

list_messages = extend_schema(
    operation_id="listMessages",
    parameters=[
        OpenApiParameter(
            "limit", {"type": "integer", "minimum": 1, "maximum": 100}, description="Page size (default 20)"
        ),
        OpenApiParameter(
            "after",
            {"type": "string", "minLength": 1, "maxLength": 512},
            description="The next_cursor of the previous page",
        ),
        OpenApiParameter(
            "direction",
            {"type": "string", "enum": Direction.values},
            description="Only sent or only received messages (default both)",
        ),
    ],
    summary="List messages",
    description="Newest first, sent and received, one page at a time; list items carry `text: null`.",
    responses={
        200: OpenApiResponse(
            MessageListSerializer,
            description="A page of messages",
            examples=[
                OpenApiExample(
                    "A page",
                    value={"data": [{**_MESSAGE_EXAMPLE, "text": None}], "has_more": False, "next_cursor": None},
                    response_only=True,
                )
            ],
        ),
        **error_responses(_E.VALIDATION_ERROR, _E.INVALID_CURSOR, *_ANY_OPERATION, messages=_READ_MESSAGES),
    },
)

get_message = extend_schema(
    operation_id="getMessage",
    parameters=[OpenApiParameter("id", {"type": "string", "minLength": 1, "maxLength": 256}, OpenApiParameter.PATH)],
    summary="Get one message",
    description="One message of the key's domain with its plain-text body; another domain's id is a 404.",
    responses={
        200: OpenApiResponse(
            MessageSerializer,
            description="The message",
            examples=[OpenApiExample("A message", value={**_MESSAGE_EXAMPLE, "text": "It works."}, response_only=True)],
        ),
        **error_responses(_E.VALIDATION_ERROR, _E.NOT_FOUND, *_ANY_OPERATION, messages=_READ_MESSAGES),
    },
)

get_message_raw = extend_schema(
    operation_id="getMessageRaw",
    summary="Get a received message's source",
    description="The raw source of a received message, exactly as it arrived, for the link an "
    "`email.received` event carries (its `token` expires). An addition to the spec's operations.",
    parameters=[_MESSAGE_ID, _LINK_TOKEN],
    responses={
        (200, "message/rfc822"): OpenApiTypes.BINARY,
        **error_responses(_E.VALIDATION_ERROR, _E.FORBIDDEN, _E.NOT_FOUND, *_ANY_OPERATION, messages=_LINK_MESSAGES),
    },
)

get_message_attachment = extend_schema(
    operation_id="getMessageAttachment",
    summary="Get a received message's attachment",
    description="Attachment number `index` (0-based, in the order `email.received` lists them) of a "
    "received message, for the link the event carries (its `token` expires). An addition to the spec's operations.",
    parameters=[
        _MESSAGE_ID,
        OpenApiParameter("index", {"type": "integer", "minimum": 0}, OpenApiParameter.PATH),
        _LINK_TOKEN,
    ],
    responses={
        (200, "application/octet-stream"): OpenApiTypes.BINARY,
        **error_responses(_E.VALIDATION_ERROR, _E.FORBIDDEN, _E.NOT_FOUND, *_ANY_OPERATION, messages=_LINK_MESSAGES),
    },
)


# --- Additions to the spec: suppressions and events ---------------------------------------------------------------

_LIMIT = OpenApiParameter(
    "limit", {"type": "integer", "minimum": 1, "maximum": 100}, description="Page size (default 20)"
)
_AFTER = OpenApiParameter(
    "after", {"type": "string", "minLength": 1, "maxLength": 512}, description="The next_cursor of the previous page"
)
_EMAIL = OpenApiParameter(
    "email",
    {"type": "string", "minLength": 3, "maxLength": 320},
    OpenApiParameter.PATH,
    description="The address (URL-encoded), compared as the list stores it: `Ada@Example.org` is ada@example.org",
)
_SUPPRESSION_EXAMPLE = {
    "email": "gone@example.org",
    "reason": "hard_bounce",
    "created_at": "2026-11-23T13:47:02.120034Z",
    "expires_at": None,
    "message_id": _MESSAGE_EXAMPLE["id"],
    "detail": "550 5.1.1 no such mailbox",
}
_MANUAL_EXAMPLE = {
    "email": "unsubscribed@example.org",
    "reason": "manual",
    "created_at": "2026-11-23T14:02:11.500210Z",
    "expires_at": None,
    "message_id": None,
    "detail": "asked to be removed",
}
_EVENT_EXAMPLE = {
    "type": "email.delivered",
    "id": "evt_mhq2x4k1a7d0e3k9m2q5t8w1z4c7f",
    "created_at": "2026-11-23T13:45:13.902511Z",
    "test": False,
    "data": {
        **_MESSAGE_EXAMPLE,
        "text": None,
        "recipient": "you@example.org",
        "smtp_response": "250 2.0.0 OK",
        "status_code": "2.0.0",
    },
}
_ACCEPTED_EVENT_EXAMPLE = {
    "type": "email.accepted",
    "id": "evt_mhq2x4jz0b3c6f9h2k5n8q1t4w7z0",
    "created_at": _MESSAGE_EXAMPLE["created_at"],
    "test": False,
    "data": {**_MESSAGE_EXAMPLE, "status": "accepted", "text": None},
}
_SUPPRESSION_NOT_FOUND = {
    _E.NOT_FOUND: "gone@example.org is not suppressed",
    _E.VALIDATION_ERROR: "email: must be an address like name@example.com (3 to 320 characters, URL-encoded in a path)",
}
_WRITE_SUPPRESSIONS = {_E.MISSING_PERMISSION: "This API key lacks the suppressions.write permission"}
_SIDE_NOTE = (
    " A key sees only its domain's entries, and a test key only the sandbox's list (which only test keys' sends "
    "are checked against). An addition to the spec's operations."
)

list_suppressions = extend_schema(
    operation_id="listSuppressions",
    parameters=[
        _LIMIT,
        _AFTER,
        OpenApiParameter("reason", {"type": "string", "enum": list(REASON_OF_WIRE)}, description="Only this reason"),
        OpenApiParameter(
            "email", {"type": "string", "minLength": 3, "maxLength": 320}, description="Only this address"
        ),
    ],
    summary="List suppressions",
    description="The addresses the domain does not send to, newest first, one page at a time (as GET /v1/messages)."
    + _SIDE_NOTE,
    responses={
        200: OpenApiResponse(
            SuppressionListSerializer,
            description="A page of suppressions",
            examples=[
                OpenApiExample(
                    "A page",
                    value={"data": [_MANUAL_EXAMPLE, _SUPPRESSION_EXAMPLE], "has_more": False, "next_cursor": None},
                    response_only=True,
                )
            ],
        ),
        **error_responses(
            _E.VALIDATION_ERROR,
            _E.INVALID_CURSOR,
            *_ANY_OPERATION,
            messages={**_READ_MESSAGES, **_SUPPRESSION_NOT_FOUND},
        ),
    },
)

get_suppression = extend_schema(
    operation_id="getSuppression",
    parameters=[_EMAIL],
    summary="Get one suppression",
    description="Why and since when the domain does not send to the address; 404 when it does." + _SIDE_NOTE,
    responses={
        200: OpenApiResponse(
            SuppressionSerializer,
            description="The suppression",
            examples=[OpenApiExample("A hard bounce", value=_SUPPRESSION_EXAMPLE, response_only=True)],
        ),
        **error_responses(
            _E.VALIDATION_ERROR, _E.NOT_FOUND, *_ANY_OPERATION, messages={**_READ_MESSAGES, **_SUPPRESSION_NOT_FOUND}
        ),
    },
)

put_suppression = extend_schema(
    operation_id="addSuppression",
    parameters=[_EMAIL],
    request=SuppressionPutSerializer,
    summary="Suppress an address",
    description=f"Adds a `manual` suppression (`detail` up to {MAX_API_DETAIL} characters). Idempotent: an address "
    "already suppressed, for whatever reason, is answered with its entry unchanged." + _SIDE_NOTE,
    examples=[OpenApiExample("With a note", value={"detail": "asked to be removed"}, request_only=True)],
    responses={
        200: OpenApiResponse(
            SuppressionSerializer,
            description="The suppression (new, or the existing one)",
            examples=[OpenApiExample("Added", value=_MANUAL_EXAMPLE, response_only=True)],
        ),
        **error_responses(
            _E.VALIDATION_ERROR,
            _E.INVALID_JSON,
            _E.INVALID_CONTENT_TYPE,
            *_ANY_OPERATION,
            messages={**_WRITE_SUPPRESSIONS, **_SUPPRESSION_NOT_FOUND},
        ),
    },
)

delete_suppression = extend_schema(
    operation_id="removeSuppression",
    parameters=[_EMAIL],
    summary="Remove a suppression",
    description="The domain sends to the address again, from the next send on; 404 when it is not suppressed."
    + _SIDE_NOTE,
    responses={
        204: OpenApiResponse(description="Removed"),
        **error_responses(
            _E.VALIDATION_ERROR,
            _E.NOT_FOUND,
            *_ANY_OPERATION,
            messages={**_WRITE_SUPPRESSIONS, **_SUPPRESSION_NOT_FOUND},
        ),
    },
)

list_message_events = extend_schema(
    operation_id="listMessageEvents",
    parameters=[_MESSAGE_ID],
    summary="List a message's events",
    description="Every event of the message, oldest first, each exactly the body its webhook carries, with the "
    "same `id` as the webhook's `webhook-id` (`data.status` and a received message's links are as of now). "
    "Another domain's message is a 404. An addition to the spec's operations.",
    responses={
        200: OpenApiResponse(
            MessageEventsSerializer,
            description="The message's events",
            examples=[
                OpenApiExample(
                    "Accepted, then delivered",
                    value={"data": [_ACCEPTED_EVENT_EXAMPLE, _EVENT_EXAMPLE]},
                    response_only=True,
                )
            ],
        ),
        **error_responses(_E.VALIDATION_ERROR, _E.NOT_FOUND, *_ANY_OPERATION, messages=_READ_MESSAGES),
    },
)

list_events = extend_schema(
    operation_id="listEvents",
    parameters=[
        _LIMIT,
        _AFTER,
        OpenApiParameter(
            "type",
            {"type": "array", "items": {"type": "string", "enum": MESSAGE_EVENT_TYPES}},
            style="form",
            explode=True,
            description="Only these types (repeat the parameter for several)",
        ),
        OpenApiParameter(
            "since", {"type": "string", "format": "date-time"}, description="Only events created at or after this time"
        ),
    ],
    summary="List the domain's events",
    description="The domain's message events, **oldest first**, one page at a time: for applications that poll, or "
    "catch up after their webhook endpoint was down. Each is exactly its webhook's body, with its `webhook-id` as "
    "`id`. Events are kept as long as their messages. A test key sees only test messages' events. An addition to "
    "the spec's operations.",
    responses={
        200: OpenApiResponse(
            EventListSerializer,
            description="A page of events",
            examples=[
                OpenApiExample(
                    "A page",
                    value={
                        "data": [_ACCEPTED_EVENT_EXAMPLE, _EVENT_EXAMPLE],
                        "has_more": True,
                        "next_cursor": "eyJvIjoi…",
                    },
                    response_only=True,
                )
            ],
        ),
        **error_responses(_E.VALIDATION_ERROR, _E.INVALID_CURSOR, *_ANY_OPERATION, messages=_READ_MESSAGES),
    },
)

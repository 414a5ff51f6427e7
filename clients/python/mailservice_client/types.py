"""Typed shapes of the send parameters and of the service's responses (spec section 2)."""

from typing import Any, Literal, TypedDict

Direction = Literal["sent", "received"]
Status = Literal["accepted", "delivered", "received", "bounced", "complained", "failed"]


class SendResult(TypedDict):
    id: str
    created_at: str


# `from` is a Python keyword, hence the functional form.
Message = TypedDict(
    "Message",
    {
        "id": str,
        "domain_id": str,
        "direction": Direction,
        "from": str,
        "to": list[str],
        "subject": str,
        "status": Status,
        "created_at": str,
        "text": str | None,
    },
)


# Why a receiver refused or deferred a message (webhooks' `reason`; the service's docs/webhooks.md says what
# each does): the first three suppress the address, the next four are the sender's to fix.
RefusalReason = Literal[
    "user_unknown",
    "mailbox_disabled",
    "domain_not_found",
    "blocked",
    "spam_detected",
    "authentication",
    "policy",
    "mailbox_full",
    "host_unreachable",
    "content_rejected",
    "rate_limited",
    "greylisted",
    "expired",
    "other",
]


class WebhookFailureData(Message, total=False):
    """`data` of an email.delayed, email.bounced or email.failed webhook: the message and the event's fields."""

    recipient: str
    bounce_type: Literal["hard", "soft"]
    status_code: str
    diagnostic: str
    smtp_response: str
    reason: RefusalReason
    cause: Literal["authentication", "reputation", "rate_limited", "policy", "mailbox", "other"]
    fix_check: Literal["spf", "dkim", "dmarc", "alignment", "ptr"]


class MessageList(TypedDict):
    data: list[Message]
    has_more: bool
    next_cursor: str | None


SuppressionReason = Literal["hard_bounce", "soft_bounce", "complaint", "manual"]
EventType = Literal[
    "email.accepted",
    "email.delivered",
    "email.delayed",
    "email.bounced",
    "email.complained",
    "email.failed",
    "email.suppressed",
    "email.received",
]


class Suppression(TypedDict):
    email: str  # the bare address, lower-case, as the list compares it
    reason: SuppressionReason
    created_at: str
    expires_at: str | None
    message_id: str | None  # the message whose report caused it
    detail: str


class SuppressionList(TypedDict):
    data: list[Suppression]
    has_more: bool
    next_cursor: str | None


class Event(TypedDict):
    """Exactly a webhook's body: `id` is its webhook-id; `data` the message plus the event's own fields."""

    type: EventType
    id: str
    created_at: str
    test: bool
    data: dict[str, Any]


class EventList(TypedDict):
    data: list[Event]
    has_more: bool
    next_cursor: str | None


Addresses = str | list[str]  # one mailbox, or a list of them
TemplateVariable = str | int | float | bool


class _TemplateReferenceRequired(TypedDict):
    id: str  # the template's id or slug


class TemplateReference(_TemplateReferenceRequired, total=False):
    version: int  # default: the newest published version
    variables: dict[str, TemplateVariable]


# `from` is a Python keyword, hence the functional form; it is the one field every send needs.
_SendParamsRequired = TypedDict("_SendParamsRequired", {"from": str})


class SendParams(_SendParamsRequired, total=False):
    """The body of POST /v1/send: inline content (subject, text and/or html) or a `template`."""

    to: Addresses
    cc: Addresses
    bcc: Addresses
    replyTo: Addresses  # noqa: N815 - the wire name
    subject: str
    text: str
    html: str
    template: TemplateReference

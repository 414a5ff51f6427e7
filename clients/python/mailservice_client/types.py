"""Typed shapes of the service's responses (spec section 2), as returned by the native client."""

from typing import Literal, TypedDict

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


class MessageList(TypedDict):
    data: list[Message]
    has_more: bool
    next_cursor: str | None

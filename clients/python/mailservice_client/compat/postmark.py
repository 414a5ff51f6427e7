"""postmark-python look-alike: the asynchronous `ServerClient` with `await client.outbound.send({...})`.

Migration: `import postmark` becomes `from mailservice_client.compat import postmark`;
`ServerClient(token, base_url=...)` takes the service's key and base URL (or the MAILSERVICE_* environment).
"""

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mailservice_client._http import AsyncTransport, resolve_config
from mailservice_client.compat._common import check_length, native_send, require, screen, split_addresses
from mailservice_client.errors import ValidationError

__all__ = ["SendResponse", "ServerClient", "to_send_request"]

_UNSUPPORTED = (
    "tag",
    "headers",
    "track_opens",
    "track_links",
    "attachments",
    "metadata",
    "template_id",
    "template_alias",
    "template_model",
    "inline_css",
)
_NAMES = {
    "from": "sender",
    "to": "to",
    "cc": "cc",
    "bcc": "bcc",
    "replyTo": "reply_to",
    "subject": "subject",
    "text": "text_body",
    "html": "html_body",
}
MAX_ADDRESS_STRING = 16000
MAX_REPLY_TO_STRING = 3200
MAX_SUBJECT = 2000


def to_send_request(message: Mapping[str, Any]) -> dict[str, Any]:
    """The native send body for `outbound.send(message)`."""
    message = screen(
        message,
        allowed=("sender", "to", "cc", "bcc", "reply_to", "subject", "text_body", "html_body", "message_stream"),
        unsupported=_UNSUPPORTED,
    )
    body: dict[str, Any] = {"from": require(message, "sender", "sender")}
    to = require(message, "to", "to")
    check_length(to, "to", min_length=3, max_length=MAX_ADDRESS_STRING)
    body["to"] = split_addresses(to, "to")
    for name in ("cc", "bcc"):
        if name in message:
            check_length(message[name], name, max_length=MAX_ADDRESS_STRING)
            body[name] = split_addresses(message[name], name)
    if "reply_to" in message:
        check_length(message["reply_to"], "reply_to", max_length=MAX_REPLY_TO_STRING)
        body["replyTo"] = split_addresses(message["reply_to"], "reply_to")
    subject = message.get("subject", "")
    check_length(subject, "subject", max_length=MAX_SUBJECT)
    body["subject"] = subject
    for key, name in (("text_body", "text"), ("html_body", "html")):
        if key in message:
            body[name] = message[key]
    if message.get("message_stream", "outbound") != "outbound":
        raise ValidationError("message_stream", "only the 'outbound' stream is supported")
    return native_send(body, _NAMES)


@dataclass(frozen=True)
class SendResponse:
    to: str
    submitted_at: datetime
    message_id: str
    error_code: int = 0
    message: str = "OK"

    @property
    def success(self) -> bool:
        return self.error_code == 0


class _Outbound:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def send(self, message: Mapping[str, Any]) -> SendResponse:
        body = to_send_request(message)
        reply = await self._transport.request("POST", "/v1/send", json=body)
        return SendResponse(
            to=message["to"],
            submitted_at=datetime.fromisoformat(reply.data["created_at"].replace("Z", "+00:00")),
            message_id=reply.data["id"],
        )


class ServerClient:
    """`postmark.ServerClient(server_token, base_url=...)`; use with `async with` or `await close()`."""

    def __init__(self, server_token: str | None = None, *, base_url: str | None = None, timeout: float | None = None):
        self._transport = AsyncTransport(resolve_config(api_key=server_token, base_url=base_url, timeout=timeout))
        self.outbound = _Outbound(self._transport)

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "ServerClient":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

"""sendgrid look-alike: `SendGridAPIClient(api_key, host=...)` whose `send(message)` takes the v3 JSON shape.

Migration: `import sendgrid` becomes `from mailservice_client.compat import sendgrid` (or
`from mailservice_client.compat.sendgrid import SendGridAPIClient`); `host=` is the service's base URL.
Helper objects (`Mail`, `Email`, ...) are not supported: pass the v3 JSON dict. Errors raise the
MailServiceError family.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from mailservice_client._http import SyncTransport, resolve_config
from mailservice_client._mailbox import is_bare_address
from mailservice_client._validate import check_string
from mailservice_client.compat._common import check_length, native_send, require, screen
from mailservice_client.errors import ValidationError

__all__ = ["Response", "SendGridAPIClient", "to_send_request"]

_UNSUPPORTED = (
    "template_id",
    "attachments",
    "send_at",
    "batch_id",
    "asm",
    "mail_settings",
    "tracking_settings",
    "ip_pool_name",
    "headers",
    "categories",
    "custom_args",
    "sections",
    "reply_to_list",
)
_PERSONALIZATION_UNSUPPORTED = (
    "subject",
    "headers",
    "substitutions",
    "dynamic_template_data",
    "custom_args",
    "send_at",
)
_NAMES = {
    "to": "personalizations[0].to",
    "cc": "personalizations[0].cc",
    "bcc": "personalizations[0].bcc",
    "replyTo": "reply_to",
    "text": "content",
    "html": "content",
}
_CONTENT_TYPES = {"text/plain": "text", "text/html": "html"}
MAX_SUBJECT = 2000
MAX_EMAIL = 254
MAX_NAME = 100


def mailbox_of(address: Any, field: str) -> Any:
    """A Mailbox string for an address: a string as given, or `{email, name}` as `name <email>`."""
    if isinstance(address, str):
        return address
    address = screen(address, allowed=("email", "name"), unsupported=(), prefix=f"{field}.")
    email = require(address, "email", f"{field}.email")
    check_string(email, f"{field}.email", max_length=MAX_EMAIL)
    if not is_bare_address(email):
        raise ValidationError(f"{field}.email", "must be an email address like name@example.com")
    name = check_string(address.get("name", ""), f"{field}.name", max_length=MAX_NAME)
    if any(char in name for char in "<>\r\n"):
        raise ValidationError(f"{field}.name", "must not contain <, >, CR or LF")
    return f"{name} <{email}>" if name else email


def _addresses(value: Any, field: str, *, max_items: int) -> list[Any]:
    if not isinstance(value, list) or len(value) > max_items:
        raise ValidationError(field, f"must be a list of at most {max_items} addresses")
    return [mailbox_of(item, f"{field}[{index}]") for index, item in enumerate(value)]


def to_send_request(message: Mapping[str, Any]) -> dict[str, Any]:
    """The native send body for `send(message)` (the v3 mail/send JSON)."""
    message = screen(
        message,
        allowed=("from", "personalizations", "subject", "reply_to", "content"),
        unsupported=_UNSUPPORTED,
    )
    body: dict[str, Any] = {"from": mailbox_of(require(message, "from", "from"), "from")}
    personalizations = require(message, "personalizations", "personalizations")
    if not isinstance(personalizations, list) or len(personalizations) != 1:
        raise ValidationError("personalizations", "must hold exactly one personalization")
    prefix = "personalizations[0]"
    personalization = screen(
        personalizations[0], allowed=("to", "cc", "bcc"), unsupported=_PERSONALIZATION_UNSUPPORTED, prefix=f"{prefix}."
    )
    body["to"] = _addresses(require(personalization, "to", f"{prefix}.to"), f"{prefix}.to", max_items=50)
    for name in ("cc", "bcc"):
        recipients = _addresses(personalization.get(name, []), f"{prefix}.{name}", max_items=50)
        if recipients:
            body[name] = recipients
    if "reply_to" in message:
        body["replyTo"] = [mailbox_of(message["reply_to"], "reply_to")]
    subject = require(message, "subject", "subject")
    check_length(subject, "subject", max_length=MAX_SUBJECT)
    body["subject"] = subject
    content = require(message, "content", "content")
    if not isinstance(content, list) or not 1 <= len(content) <= 2:
        raise ValidationError("content", "must hold 1 or 2 items")
    for index, item in enumerate(content):
        item = screen(item, allowed=("type", "value"), unsupported=(), prefix=f"content[{index}].")
        content_type = require(item, "type", f"content[{index}].type")
        wire_name = _CONTENT_TYPES.get(content_type) if isinstance(content_type, str) else None
        if wire_name is None or wire_name in body:
            raise ValidationError(f"content[{index}].type", "must be text/plain or text/html, each at most once")
        body[wire_name] = require(item, "value", f"content[{index}].value")
    return native_send(body, _NAMES)


@dataclass(frozen=True)
class Response:
    """The accepted send: status 202, `headers["x-message-id"]`, an empty body."""

    headers: httpx.Headers
    status_code: int = 202
    body: str = ""

    @property
    def statusCode(self) -> int:  # noqa: N802 - the JS-style alias the spec names
        return self.status_code


class SendGridAPIClient:
    def __init__(self, api_key: str | None = None, host: str | None = None, timeout: float | None = None) -> None:
        self._transport = SyncTransport(resolve_config(api_key=api_key, base_url=host, timeout=timeout))

    def send(self, message: Mapping[str, Any]) -> Response:
        body = to_send_request(message)
        reply = self._transport.request("POST", "/v1/send", json=body)
        return Response(headers=httpx.Headers({**reply.headers, "x-message-id": reply.data["id"]}))

    def close(self) -> None:
        self._transport.close()

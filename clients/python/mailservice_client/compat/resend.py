"""resend look-alike: module-level `api_key` / `api_url` and `Emails.send(params)`.

Migration: `import resend` becomes `from mailservice_client.compat import resend`; set
`resend.api_key` and `resend.api_url` (the service's base URL), or the MAILSERVICE_* environment.
Errors raise the MailServiceError family.
"""

from collections.abc import Mapping
from typing import Any

from mailservice_client._http import SyncTransport, resolve_config
from mailservice_client.client import idempotency_headers
from mailservice_client.compat._common import as_list, check_length, native_send, require, screen
from mailservice_client.errors import ValidationError

__all__ = ["Emails", "api_key", "api_url", "to_send_request"]

api_key: str | None = None
api_url: str | None = None

_UNSUPPORTED = ("headers", "attachments", "tags", "scheduled_at", "react", "topic_id")
_FIELDS = ("from", "to", "subject", "cc", "bcc", "reply_to", "text", "html", "template")
_NAMES = {"replyTo": "reply_to"}
MAX_SUBJECT = 2000


def to_send_request(params: Mapping[str, Any]) -> dict[str, Any]:
    """The native send body for `Emails.send(params)` (plain or template variant)."""
    params = screen(params, allowed=_FIELDS, unsupported=_UNSUPPORTED)
    body: dict[str, Any] = {"from": require(params, "from", "from"), "to": as_list(require(params, "to", "to"))}
    for key, name in (("cc", "cc"), ("bcc", "bcc"), ("reply_to", "replyTo")):
        if key in params:
            body[name] = as_list(params[key])
    for key in ("subject", "text", "html", "template"):
        if key in params:
            body[key] = params[key]
    if "template" not in params:
        check_length(require(params, "subject", "subject"), "subject", max_length=MAX_SUBJECT)
    return native_send(body, _NAMES)


class Emails:
    @classmethod
    def send(cls, params: Mapping[str, Any], options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Send one email; returns `{"id": ...}`. `options` may carry `idempotency_key`, as resend's does."""
        options = dict(options or {})
        key = options.pop("idempotency_key", None)
        if options:
            raise ValidationError(f"options.{next(iter(options))}", "is not supported by mailservice")
        headers = idempotency_headers(key, "options.idempotency_key")
        body = to_send_request(params)
        transport = SyncTransport(resolve_config(api_key=api_key, base_url=api_url))
        try:
            reply = transport.request("POST", "/v1/send", json=body, headers=headers)
        finally:
            transport.close()
        return {"id": reply.data["id"]}

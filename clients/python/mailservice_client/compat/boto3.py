"""`boto3.client("sesv2")` look-alike: `send_email(...)` in the SES v2 shape, sent as a native send.

Migration: `import boto3` becomes `from mailservice_client.compat import boto3`, and the client
gets `endpoint_url=` (the service's base URL) and `api_key=` (or the MAILSERVICE_* environment).
"""

from typing import Any

from mailservice_client._http import SyncTransport, resolve_config
from mailservice_client.compat._common import native_send, require, screen
from mailservice_client.errors import MailServiceError, ValidationError

__all__ = ["ClientError", "SESV2Client", "UnknownServiceError", "client", "to_send_request"]

_UNSUPPORTED = (
    "FromEmailAddressIdentityArn",
    "FeedbackForwardingEmailAddress",
    "FeedbackForwardingEmailAddressIdentityArn",
    "EmailTags",
    "ConfigurationSetName",
    "ListManagementOptions",
    "EndpointId",
    "TenantName",
)
_NAMES = {
    "from": "FromEmailAddress",
    "to": "Destination.ToAddresses",
    "cc": "Destination.CcAddresses",
    "bcc": "Destination.BccAddresses",
    "replyTo": "ReplyToAddresses",
    "subject": "Content.Simple.Subject.Data",
    "text": "Content.Simple.Body.Text.Data",
    "html": "Content.Simple.Body.Html.Data",
}
_DESTINATIONS = {"ToAddresses": "to", "CcAddresses": "cc", "BccAddresses": "bcc"}


class UnknownServiceError(ValueError):
    pass


class ClientError(MailServiceError):
    """botocore's ClientError shape: `.response["Error"]["Code"]` is the service's error code."""

    def __init__(self, error: MailServiceError, operation_name: str) -> None:
        super().__init__(
            error.message, code=error.code, status=error.status, request_id=error.request_id, headers=error.headers
        )
        self.operation_name = operation_name
        self.response: dict[str, Any] = {
            "Error": {"Code": error.code, "Message": error.message},
            "ResponseMetadata": {
                "RequestId": error.request_id or "",
                "HTTPStatusCode": error.status,
                "HTTPHeaders": dict(error.headers),
                "RetryAttempts": 0,
            },
        }

    def __str__(self) -> str:
        return f"An error occurred ({self.code}) when calling the {self.operation_name} operation: {self.message}"


def _content(block: Any, field: str) -> Any:
    """`{Data, Charset}`: the Data string (Charset may only be UTF-8)."""
    block = screen(block, allowed=("Data", "Charset"), unsupported=(), prefix=f"{field}.")
    if "Charset" in block and block["Charset"] != "UTF-8":
        raise ValidationError(f"{field}.Charset", "only UTF-8 is supported")
    return require(block, "Data", f"{field}.Data")


def to_send_request(**params: Any) -> dict[str, Any]:
    """The native send body for `send_email(**params)`."""
    params = screen(
        params,
        allowed=("FromEmailAddress", "Destination", "Content", "ReplyToAddresses"),
        unsupported=_UNSUPPORTED,
    )
    body: dict[str, Any] = {"from": require(params, "FromEmailAddress", "FromEmailAddress")}
    destination = screen(
        require(params, "Destination", "Destination"), allowed=_DESTINATIONS, unsupported=(), prefix="Destination."
    )
    if not destination:
        raise ValidationError("Destination", "needs at least one of ToAddresses, CcAddresses or BccAddresses")
    for key, name in _DESTINATIONS.items():
        if key in destination:
            if not isinstance(destination[key], list):
                raise ValidationError(f"Destination.{key}", "must be a list of addresses")
            body[name] = destination[key]
    content = screen(
        require(params, "Content", "Content"), allowed=("Simple",), unsupported=("Raw", "Template"), prefix="Content."
    )
    simple = screen(
        require(content, "Simple", "Content.Simple"),
        allowed=("Subject", "Body"),
        unsupported=("Headers", "Attachments"),
        prefix="Content.Simple.",
    )
    body["subject"] = _content(require(simple, "Subject", "Content.Simple.Subject"), "Content.Simple.Subject")
    content_body = screen(
        require(simple, "Body", "Content.Simple.Body"),
        allowed=("Text", "Html"),
        unsupported=(),
        prefix="Content.Simple.Body.",
    )
    if not content_body:
        raise ValidationError("Content.Simple.Body", "needs at least one of Text or Html")
    for key, name in (("Text", "text"), ("Html", "html")):
        if key in content_body:
            body[name] = _content(content_body[key], f"Content.Simple.Body.{key}")
    if "ReplyToAddresses" in params:
        reply_to = params["ReplyToAddresses"]
        if not isinstance(reply_to, list):
            raise ValidationError("ReplyToAddresses", "must be a list of addresses")
        if reply_to:
            body["replyTo"] = reply_to
    return native_send(body, _NAMES)


class SESV2Client:
    def __init__(self, *, endpoint_url: str | None, api_key: str | None, timeout: float | None) -> None:
        self._transport = SyncTransport(resolve_config(api_key=api_key, base_url=endpoint_url, timeout=timeout))

    def send_email(self, **params: Any) -> dict[str, Any]:
        body = to_send_request(**params)
        try:
            reply = self._transport.request("POST", "/v1/send", json=body)
        except MailServiceError as exc:
            if exc.status is None:
                raise
            raise ClientError(exc, "SendEmail") from exc
        return {
            "MessageId": reply.data["id"],
            "ResponseMetadata": {
                "RequestId": reply.request_id or "",
                "HTTPStatusCode": reply.status,
                "HTTPHeaders": reply.headers,
                "RetryAttempts": 0,
            },
        }

    def close(self) -> None:
        self._transport.close()


def client(
    service_name: str,
    region_name: str | None = None,
    *,
    endpoint_url: str | None = None,
    api_key: str | None = None,
    timeout: float | None = None,
) -> SESV2Client:
    """`boto3.client("sesv2", ...)`. `region_name` is accepted and has no effect; no AWS credentials are used."""
    if service_name != "sesv2":
        raise UnknownServiceError(f"Unknown service: {service_name!r}; only 'sesv2' is provided")
    return SESV2Client(endpoint_url=endpoint_url, api_key=api_key, timeout=timeout)

"""One exception family for every failure, local or remote.

Each error carries the service's `code`, the HTTP `status` (None when no response came back),
the message and the `request_id` to quote when asking for help.
"""

import json
from collections.abc import Mapping
from typing import Any


class MailServiceError(Exception):
    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.headers: dict[str, str] = dict(headers or {})

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        if self.status is not None:
            text += f" (HTTP {self.status})"
        if self.request_id:
            text += f" [request_id={self.request_id}]"
        return text


class ValidationError(MailServiceError, ValueError):
    """Raised locally, before any request, for input the service would reject; `field` names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason, code="ValidationError")
        self.field = field
        self.reason = reason


class ConfigurationError(MailServiceError):
    """No API key or base URL was given and the environment does not provide one."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="ConfigurationError")


class MailServiceConnectionError(MailServiceError):
    """No response came back (refused, reset, timed out). A send may or may not have been accepted."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="ConnectionError")


class BadRequestError(MailServiceError):
    """HTTP 400: invalid request content, invalid cursor, or sender domain not verified."""


class AuthenticationError(MailServiceError):
    """HTTP 401: the key is missing, invalid or revoked."""


class PermissionDeniedError(MailServiceError):
    """HTTP 403: the key lacks the permission, or the sender is on another domain."""


class NotFoundError(MailServiceError):
    """HTTP 404."""


class MethodNotAllowedError(MailServiceError):
    """HTTP 405."""


class ConflictError(MailServiceError):
    """HTTP 409: the `Idempotency-Key` was used with another body (`IdempotencyKeyReused`) or its first
    request is still being processed (`IdempotencyKeyInFlight`: retry shortly with the same key)."""


class RequestTooLargeError(MailServiceError):
    """HTTP 413."""


class RateLimitError(MailServiceError):
    """HTTP 429; `retry_after` is the number of seconds the service asks to wait (None if not said)."""

    @property
    def retry_after(self) -> int | None:
        value = self.headers.get("retry-after", "")
        return int(value) if value.isdigit() else None


class InternalServerError(MailServiceError):
    """HTTP 500: the service failed unexpectedly; quote `request_id` when asking for help."""


class SendingPausedError(MailServiceError):
    """`SendingPaused` (HTTP 503): an operator or a safeguard paused sending; no message was sent."""


class ServiceUnavailableError(MailServiceError):
    """Any other HTTP 502, 503 or 504 (the database unreachable, a proxy without a backend): retry later."""


# The class of each code the service answers with (docs/api.md, "Error codes"): the code decides,
# so a database outage and a paused domain (both 503) stay apart.
_BY_CODE: dict[str, type[MailServiceError]] = {
    "ValidationError": BadRequestError,
    "InvalidJson": BadRequestError,
    "InvalidContentType": BadRequestError,
    "DomainNotVerified": BadRequestError,
    "TemplateNotFound": BadRequestError,
    "MissingTemplateVariable": BadRequestError,
    "InvalidCursor": BadRequestError,
    "BadRequest": BadRequestError,
    "Unauthorized": AuthenticationError,
    "MissingPermission": PermissionDeniedError,
    "SenderNotAllowed": PermissionDeniedError,
    "Forbidden": PermissionDeniedError,
    "NotFound": NotFoundError,
    "MethodNotAllowed": MethodNotAllowedError,
    "IdempotencyKeyReused": ConflictError,
    "IdempotencyKeyInFlight": ConflictError,
    "RequestTooLarge": RequestTooLargeError,
    "RateLimited": RateLimitError,
    "AllowanceExhausted": RateLimitError,
    "InternalError": InternalServerError,
    "SendingPaused": SendingPausedError,
    "ServiceUnavailable": ServiceUnavailableError,
}

# A code this client does not know (a newer service), or no envelope at all (a proxy's page):
# the status decides.
_BY_STATUS: dict[int, type[MailServiceError]] = {
    400: BadRequestError,
    401: AuthenticationError,
    403: PermissionDeniedError,
    404: NotFoundError,
    405: MethodNotAllowedError,
    409: ConflictError,
    413: RequestTooLargeError,
    429: RateLimitError,
    500: InternalServerError,
    502: ServiceUnavailableError,
    503: ServiceUnavailableError,
    504: ServiceUnavailableError,
}


def error_class(code: str, status: int) -> type[MailServiceError]:
    """The class of an error response: by its `code` first, by its HTTP status second."""
    return _BY_CODE.get(code) or _BY_STATUS.get(status, MailServiceError)


def error_from_response(status: int, headers: Mapping[str, str], body: bytes) -> MailServiceError:
    """The error for a non-2xx response: the ApiError envelope when there is one, else the HTTP status."""
    lower = {name.lower(): value for name, value in headers.items()}
    code, message, request_id = f"Http{status}", f"HTTP {status}", lower.get("x-request-id")
    try:
        envelope: Any = json.loads(body)
    except ValueError:
        envelope = None
    error = envelope.get("error") if isinstance(envelope, dict) else None
    if isinstance(error, dict):
        code = str(error.get("code") or code)
        message = str(error.get("message") or message)
        request_id = str(error.get("request_id") or request_id or "") or None
    return error_class(code, status)(message, code=code, status=status, request_id=request_id, headers=lower)

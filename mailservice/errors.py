"""The one error contract: stable codes, their HTTP statuses, and the exception services raise.

This module is the shared kernel's: it imports nothing from the HTTP layer, so services,
commands and SMTP servers raise ApiError without depending on DRF. `mailservice.api.exceptions`
renders it as the spec's envelope; the code table of docs/api.md is checked against `ErrorCode`.
"""

from enum import StrEnum


class ErrorCode(StrEnum):
    # 400
    VALIDATION_ERROR = "ValidationError"
    INVALID_JSON = "InvalidJson"
    INVALID_CONTENT_TYPE = "InvalidContentType"
    DOMAIN_NOT_VERIFIED = "DomainNotVerified"
    TEMPLATE_NOT_FOUND = "TemplateNotFound"
    MISSING_TEMPLATE_VARIABLE = "MissingTemplateVariable"
    INVALID_CURSOR = "InvalidCursor"
    BAD_REQUEST = "BadRequest"
    # 401, 403
    UNAUTHORIZED = "Unauthorized"
    MISSING_PERMISSION = "MissingPermission"
    SENDER_NOT_ALLOWED = "SenderNotAllowed"
    FORBIDDEN = "Forbidden"
    # 404, 405, 413
    NOT_FOUND = "NotFound"
    METHOD_NOT_ALLOWED = "MethodNotAllowed"
    REQUEST_TOO_LARGE = "RequestTooLarge"
    # 409
    IDEMPOTENCY_KEY_REUSED = "IdempotencyKeyReused"
    IDEMPOTENCY_KEY_IN_FLIGHT = "IdempotencyKeyInFlight"
    # 429
    RATE_LIMITED = "RateLimited"
    ALLOWANCE_EXHAUSTED = "AllowanceExhausted"
    # 500, 503
    INTERNAL_ERROR = "InternalError"
    SENDING_PAUSED = "SendingPaused"
    SERVICE_UNAVAILABLE = "ServiceUnavailable"
    # Operator commands only (never on the HTTP API): rendered as one-line CLI errors.
    DOMAIN_NOT_FOUND = "DomainNotFound"
    SUPPRESSION_NOT_FOUND = "SuppressionNotFound"
    INVALID_ADDRESS = "InvalidAddress"


# The status each code is answered with; one table for every renderer.
STATUS_OF_CODE: dict[ErrorCode, int] = {
    ErrorCode.VALIDATION_ERROR: 400,
    ErrorCode.INVALID_JSON: 400,
    ErrorCode.INVALID_CONTENT_TYPE: 400,
    ErrorCode.DOMAIN_NOT_VERIFIED: 400,
    ErrorCode.TEMPLATE_NOT_FOUND: 400,
    ErrorCode.MISSING_TEMPLATE_VARIABLE: 400,
    ErrorCode.INVALID_CURSOR: 400,
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.MISSING_PERMISSION: 403,
    ErrorCode.SENDER_NOT_ALLOWED: 403,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.REQUEST_TOO_LARGE: 413,
    ErrorCode.IDEMPOTENCY_KEY_REUSED: 409,
    ErrorCode.IDEMPOTENCY_KEY_IN_FLIGHT: 409,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.ALLOWANCE_EXHAUSTED: 429,
    ErrorCode.INTERNAL_ERROR: 500,
    ErrorCode.SENDING_PAUSED: 503,
    ErrorCode.SERVICE_UNAVAILABLE: 503,
    ErrorCode.DOMAIN_NOT_FOUND: 400,
    ErrorCode.SUPPRESSION_NOT_FOUND: 404,
    ErrorCode.INVALID_ADDRESS: 400,
}

# Codes raised only by operator commands (one-line CLI errors); the API never answers with them,
# so the table of API codes in docs/api.md leaves them out.
OPERATOR_ONLY: frozenset[ErrorCode] = frozenset(
    {ErrorCode.DOMAIN_NOT_FOUND, ErrorCode.SUPPRESSION_NOT_FOUND, ErrorCode.INVALID_ADDRESS}
)

# What a bare status means when something other than a service produced it (Django's own pages).
CODE_OF_STATUS: dict[int, ErrorCode] = {
    400: ErrorCode.BAD_REQUEST,
    401: ErrorCode.UNAUTHORIZED,
    403: ErrorCode.FORBIDDEN,
    404: ErrorCode.NOT_FOUND,
    405: ErrorCode.METHOD_NOT_ALLOWED,
    413: ErrorCode.REQUEST_TOO_LARGE,
    429: ErrorCode.RATE_LIMITED,
    500: ErrorCode.INTERNAL_ERROR,
    503: ErrorCode.SERVICE_UNAVAILABLE,
}


class ApiError(Exception):
    code: ErrorCode = ErrorCode.BAD_REQUEST

    def __init__(self, message: str, *, code: ErrorCode | None = None, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.headers = headers or {}

    @property
    def status(self) -> int:
        return STATUS_OF_CODE[self.code]


class ValidationFailed(ApiError):
    code = ErrorCode.VALIDATION_ERROR


class NotFound(ApiError):
    code = ErrorCode.NOT_FOUND


class PermissionDenied(ApiError):
    code = ErrorCode.FORBIDDEN


class SendingPaused(ApiError):
    code = ErrorCode.SENDING_PAUSED


class TooManyRequests(ApiError):
    code = ErrorCode.RATE_LIMITED

    def __init__(self, message: str, *, retry_after: int, code: ErrorCode | None = None) -> None:
        super().__init__(message, code=code, headers={"Retry-After": str(max(1, retry_after))})

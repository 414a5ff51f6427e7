"""Python client for the mailservice HTTP API.

`MailService` / `AsyncMailService` speak the native API; `mailservice_client.compat` holds
drop-in modules that mimic four email SDKs and translate every call into the native send.
"""

from mailservice_client._http import __version__
from mailservice_client.client import AsyncMailService, MailService
from mailservice_client.errors import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    ConflictError,
    InternalServerError,
    MailServiceConnectionError,
    MailServiceError,
    MethodNotAllowedError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    SendingPausedError,
    ServiceUnavailableError,
    ValidationError,
)
from mailservice_client.types import (
    Event,
    EventList,
    Message,
    MessageList,
    RefusalReason,
    SendParams,
    SendResult,
    Suppression,
    SuppressionList,
    TemplateReference,
    WebhookFailureData,
)

__all__ = [
    "AsyncMailService",
    "AuthenticationError",
    "BadRequestError",
    "ConfigurationError",
    "ConflictError",
    "Event",
    "EventList",
    "InternalServerError",
    "MailService",
    "MailServiceConnectionError",
    "MailServiceError",
    "Message",
    "MessageList",
    "MethodNotAllowedError",
    "NotFoundError",
    "PermissionDeniedError",
    "RateLimitError",
    "RefusalReason",
    "RequestTooLargeError",
    "SendParams",
    "SendResult",
    "SendingPausedError",
    "ServiceUnavailableError",
    "Suppression",
    "SuppressionList",
    "TemplateReference",
    "ValidationError",
    "WebhookFailureData",
    "__version__",
]

"""The one error contract: every failure is rendered as the spec's ApiError envelope.

Services raise ApiError (or a subclass) with a stable `code`; the DRF exception handler and
the Django handlers below render it, so no response is ever an HTML page or a traceback.
"""

import logging
from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response

logger = logging.getLogger(__name__)


class ApiError(Exception):
    status = 400
    code = "InvalidRequest"

    def __init__(
        self, message: str, *, code: str | None = None, status: int | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status
        self.headers = headers or {}


class ValidationFailed(ApiError):
    status = 400
    code = "ValidationError"


class NotFound(ApiError):
    status = 404
    code = "NotFound"


class PermissionDenied(ApiError):
    status = 403
    code = "Forbidden"


class SendingPaused(ApiError):
    status = 503
    code = "SendingPaused"


class TooManyRequests(ApiError):
    status = 429
    code = "RateLimited"

    def __init__(self, message: str, *, retry_after: int, code: str | None = None) -> None:
        super().__init__(message, code=code, headers={"Retry-After": str(max(1, retry_after))})


def request_id_of(request: Any) -> str:
    return getattr(request, "request_id", None) or "unknown"


def error_body(code: str, message: str, request: Any) -> dict[str, Any]:
    # Messages may quote the request (an unknown field's name); a lone surrogate from a JSON
    # escape there could not be encoded as UTF-8, so it is shown escaped instead.
    printable = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"error": {"code": code, "message": printable, "request_id": request_id_of(request)}}


def error_response(
    request: HttpRequest, status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> JsonResponse:
    response = JsonResponse(error_body(code, message, request), status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _flatten_detail(detail: Any, path: str = "") -> list[str]:
    """DRF nests errors by field; the envelope carries one message naming each field."""
    if isinstance(detail, dict):
        messages = []
        for key, value in detail.items():
            name = "body" if key == "non_field_errors" else str(key)
            messages += _flatten_detail(value, f"{path}.{name}" if path else name)
        return messages
    if isinstance(detail, list):
        messages = []
        for index, value in enumerate(detail):
            nested = isinstance(value, (dict, list))
            messages += _flatten_detail(value, f"{path}[{index}]" if nested else path)
        return messages
    text = str(detail)
    return [f"{path}: {text}" if path and path != "body" else text]


# DRF's own exceptions, mapped onto the spec's statuses (wrong media type is a 400 here).
_DRF_CODES: dict[type, tuple[int, str]] = {
    drf_exceptions.ParseError: (400, "InvalidJson"),
    drf_exceptions.UnsupportedMediaType: (400, "InvalidContentType"),
    drf_exceptions.NotAuthenticated: (401, "Unauthorized"),
    drf_exceptions.AuthenticationFailed: (401, "Unauthorized"),
    drf_exceptions.PermissionDenied: (403, "Forbidden"),
    drf_exceptions.NotFound: (404, "NotFound"),
    drf_exceptions.MethodNotAllowed: (405, "MethodNotAllowed"),
    drf_exceptions.Throttled: (429, "RateLimited"),
    drf_exceptions.ValidationError: (400, "ValidationError"),
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    if isinstance(exc, ApiError):
        return Response(error_body(exc.code, exc.message, request), status=exc.status, headers=exc.headers)
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("RequestTooLarge", "Request body is too large", request), status=413)
    if isinstance(exc, drf_exceptions.APIException):
        status, code = next(
            (mapped for cls, mapped in _DRF_CODES.items() if isinstance(exc, cls)), (exc.status_code, "Error")
        )
        if isinstance(exc, drf_exceptions.ValidationError):
            message = "; ".join(_flatten_detail(exc.detail))
        elif isinstance(exc, drf_exceptions.ParseError):
            message = "Request body is not valid JSON"
        elif isinstance(exc, drf_exceptions.UnsupportedMediaType):
            message = "Content-Type must be application/json"
        else:
            message = str(exc.detail)
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if getattr(exc, "wait", None):
            headers["Retry-After"] = str(int(exc.wait))
        return Response(error_body(code, message, request), status=status, headers=headers)
    return None  # Unexpected: ApiErrorMiddleware logs it and renders a 500 envelope.


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(request, 404, "NotFound", "No such resource")


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(request, 400, "BadRequest", "Bad request")


def forbidden_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(request, 403, "Forbidden", "Forbidden")


def server_error_view(request: HttpRequest) -> JsonResponse:
    return error_response(request, 500, "InternalError", "An unexpected error occurred; quote the request id")

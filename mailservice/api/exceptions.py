"""Renders the error contract (`mailservice.errors`) as the spec's ApiError envelope.

The DRF exception handler and the Django handlers below are the only renderers, so no response
is ever an HTML page or a traceback.
"""

from typing import Any

from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from rest_framework import exceptions as drf_exceptions
from rest_framework.response import Response
from rest_framework.settings import api_settings

from mailservice.errors import STATUS_OF_CODE, ApiError, ErrorCode


def request_id_of(request: Any) -> str:
    return getattr(request, "request_id", None) or "unknown"


def error_body(code: ErrorCode, message: str, request: Any) -> dict[str, Any]:
    # Messages may quote the request (an unknown field's name); a lone surrogate from a JSON
    # escape there could not be encoded as UTF-8, so it is shown escaped instead.
    printable = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return {"error": {"code": str(code), "message": printable, "request_id": request_id_of(request)}}


def error_response(
    request: HttpRequest, code: ErrorCode, message: str, headers: dict[str, str] | None = None
) -> JsonResponse:
    response = JsonResponse(error_body(code, message, request), status=STATUS_OF_CODE[code])
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _flatten_detail(detail: Any, path: str = "") -> list[str]:
    """DRF nests errors by field; the envelope carries one message naming each field by its path.

    Errors of the body as a whole (DRF's non-field key) carry no path, so a field that happens
    to be named `body` is still named.
    """
    if isinstance(detail, dict):
        messages = []
        for key, value in detail.items():
            if key == api_settings.NON_FIELD_ERRORS_KEY:
                messages += _flatten_detail(value, path)
            else:
                messages += _flatten_detail(value, f"{path}.{key}" if path else str(key))
        return messages
    if isinstance(detail, list):
        messages = []
        for index, value in enumerate(detail):
            nested = isinstance(value, (dict, list))
            messages += _flatten_detail(value, f"{path}[{index}]" if nested else path)
        return messages
    return [f"{path}: {detail}" if path else str(detail)]


# DRF's own exceptions, mapped onto the contract's codes (wrong media type is a 400 here).
_DRF_CODES: dict[type, ErrorCode] = {
    drf_exceptions.ParseError: ErrorCode.INVALID_JSON,
    drf_exceptions.UnsupportedMediaType: ErrorCode.INVALID_CONTENT_TYPE,
    drf_exceptions.NotAuthenticated: ErrorCode.UNAUTHORIZED,
    drf_exceptions.AuthenticationFailed: ErrorCode.UNAUTHORIZED,
    drf_exceptions.PermissionDenied: ErrorCode.FORBIDDEN,
    drf_exceptions.NotFound: ErrorCode.NOT_FOUND,
    drf_exceptions.MethodNotAllowed: ErrorCode.METHOD_NOT_ALLOWED,
    drf_exceptions.Throttled: ErrorCode.RATE_LIMITED,
    drf_exceptions.ValidationError: ErrorCode.VALIDATION_ERROR,
}


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    request = context.get("request")
    if isinstance(exc, ApiError):
        return Response(error_body(exc.code, exc.message, request), status=exc.status, headers=exc.headers)
    if isinstance(exc, RequestDataTooBig):
        code = ErrorCode.REQUEST_TOO_LARGE
        return Response(error_body(code, "Request body is too large", request), status=STATUS_OF_CODE[code])
    if isinstance(exc, drf_exceptions.APIException):
        code = next((mapped for cls, mapped in _DRF_CODES.items() if isinstance(exc, cls)), ErrorCode.BAD_REQUEST)
        if isinstance(exc, drf_exceptions.ValidationError):
            message = "; ".join(_flatten_detail(exc.detail))
        elif isinstance(exc, drf_exceptions.ParseError):
            message = "Request body is not valid JSON"
        elif isinstance(exc, drf_exceptions.UnsupportedMediaType):
            message = "Content-Type must be application/json"
        else:
            message = str(exc.detail)
        headers = {}
        auth_header, wait = getattr(exc, "auth_header", None), getattr(exc, "wait", None)
        if auth_header:
            headers["WWW-Authenticate"] = auth_header
        if wait:
            headers["Retry-After"] = str(int(wait))
        return Response(error_body(code, message, request), status=STATUS_OF_CODE[code], headers=headers)
    return None  # Unexpected: ApiErrorMiddleware logs it and renders a 500 envelope.


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(request, ErrorCode.NOT_FOUND, "No such resource")


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(request, ErrorCode.BAD_REQUEST, "Bad request")


def forbidden_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    return error_response(request, ErrorCode.FORBIDDEN, "Forbidden")


def server_error_view(request: HttpRequest) -> JsonResponse:
    return error_response(request, ErrorCode.INTERNAL_ERROR, "An unexpected error occurred; quote the request id")

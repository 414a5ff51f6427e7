"""Cross-cutting HTTP behaviour: request ids, the error envelope, rate limiting, body size, and the
split between what every request passes through and the console's own layers, which /v1/ skips."""

import logging
import secrets
import threading
from collections.abc import Callable

from django.conf import settings
from django.core.exceptions import BadRequest, ImproperlyConfigured, PermissionDenied, SuspiciousOperation
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from apikeys.cache import VERSION_KEY
from mailservice import logs
from mailservice.api.clientip import client_ip
from mailservice.api.exceptions import error_body, error_response, request_id_of
from mailservice.console import refuse
from mailservice.errors import CODE_OF_STATUS, ErrorCode
from mailservice.ratelimit import request_counted_reading

logger = logging.getLogger(__name__)

GetResponse = Callable[[HttpRequest], HttpResponse]


API_PREFIX = "/v1/"
BATCH_PATH = "/v1/send/batch"  # the one path with a body limit of its own (tests/api/test_send_batch.py checks the URL)


def max_body_bytes(path: str) -> int:
    """The largest request body accepted on `path`: a batch of sends has its own, every other request one send's."""
    return settings.MAILSERVICE_BATCH_MAX_BYTES if path == BATCH_PATH else settings.DATA_UPLOAD_MAX_MEMORY_SIZE


def is_api(path: str) -> bool:
    """A path of the HTTP API, which runs without the console's middleware (ConsoleLayers)."""
    return path.startswith(API_PREFIX)


def _is_console(request: HttpRequest) -> bool:
    return request.path.startswith(("/admin/", "/docs/"))


# ConsoleLayersEnd, built first (Django builds the chain from the last entry of MIDDLEWARE to the first),
# leaves here the rest of the chain after it for ConsoleLayers, built next by the same thread.
_built = threading.local()


class ConsoleLayers:
    """Opens the console's layers in MIDDLEWARE (sessions, CSRF, CSP, messages, ...): a /v1/ request skips them.

    Everything between this entry and ConsoleLayersEnd runs for every other path; a /v1/ request goes
    straight to what follows ConsoleLayersEnd (the view), so it never reads or sets a session or CSRF
    cookie and pays for none of those layers (docs/architecture.md, "One request, two paths"). The
    layers stay listed in MIDDLEWARE by name, as Django's and django-axes' system checks require.
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.console = get_response
        try:
            self.api = _built.__dict__.pop("after_console_layers")
        except KeyError:
            raise ImproperlyConfigured("ConsoleLayers needs ConsoleLayersEnd after it in MIDDLEWARE") from None

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.api(request) if is_api(request.path) else self.console(request)


class ConsoleLayersEnd:
    """Closes the console's layers opened by ConsoleLayers; it passes every request on unchanged."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response
        _built.after_console_layers = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)


class RequestIdMiddleware:
    """Every response carries x-request-id (the id quoted in error bodies) and is never cached."""

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request_id = "req_" + secrets.token_hex(12)
        request.request_id = request_id  # type: ignore[attr-defined]  # our own attribute, read by request_id_of
        token = logs.request_id.set(request_id)
        try:
            response = self.get_response(request)
        finally:
            logs.request_id.reset(token)
        response["x-request-id"] = request_id
        response["Cache-Control"] = "no-store"
        return response


class ApiErrorMiddleware:
    """The last line of the error contract: whatever fails, the API answers with an ApiError.

    Unexpected exceptions become a logged 500 (503 while the database is unreachable), and any
    non-JSON error page Django produces on its own (DEBUG pages, CSRF failures) is replaced.
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        is_json = response.get("Content-Type", "").startswith("application/json")
        if response.status_code >= 400 and not is_json and not _is_console(request):
            status = response.status_code
            fallback = ErrorCode.INTERNAL_ERROR if status >= 500 else ErrorCode.BAD_REQUEST
            body = error_body(CODE_OF_STATUS.get(status, fallback), response.reason_phrase, request)
            return JsonResponse(body, status=status)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if isinstance(exception, PermissionDenied) and _is_console(request):
            return refuse(request, "Your account does not have permission for this page.")
        if isinstance(exception, (Http404, PermissionDenied, SuspiciousOperation, BadRequest)):
            return None  # not failures: Django's handlers answer these with their own status
        if isinstance(exception, (OperationalError, InterfaceError)):
            logger.warning("database unavailable (request %s): %s", request_id_of(request), type(exception).__name__)
            return error_response(
                request,
                ErrorCode.SERVICE_UNAVAILABLE,
                "The service is temporarily unavailable",
                headers={"Retry-After": "5"},
            )
        if isinstance(exception, DatabaseError):
            logger.error("database error (request %s)", request_id_of(request), exc_info=exception)
        else:
            logger.error("unhandled error (request %s)", request_id_of(request), exc_info=exception)
        return error_response(request, ErrorCode.INTERNAL_ERROR, "An unexpected error occurred; quote the request id")


class RateLimitMiddleware:
    """MAILSERVICE_RATE_LIMIT per client IP across every API request, counted before authentication.

    The counter lives in the cache (mailservice.ratelimit), so with REDIS_URL set all web processes
    and the submission SMTP server share it. The same round trip reads the API keys' version, which
    says whether this process's cached keys are still current (apikeys/cache.py).
    """

    def __init__(self, get_response: GetResponse) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not is_api(request.path):
            return self.get_response(request)
        counted = request_counted_reading(ip=client_ip(request), also_read=VERSION_KEY)
        request.keys_version = counted.also_read  # type: ignore[attr-defined]  # read by BearerKeyAuthentication
        wait = counted.wait
        if wait is not None:
            return error_response(
                request,
                ErrorCode.RATE_LIMITED,
                "Too many requests; wait before retrying",
                headers={"Retry-After": str(wait)},
            )
        if request.method == "POST":
            if "wsgi.input" in request.META and not request.META.get("CONTENT_LENGTH"):
                # Django reads a WSGI body up to Content-Length: a chunked body would be taken as
                # empty. The ASGI server of the Procfile hands one on with its limit as its length (config/asgi.py).
                return error_response(
                    request,
                    ErrorCode.BAD_REQUEST,
                    "Send the body with a Content-Length header; chunked bodies are not read by this server",
                )
            declared = request.META.get("CONTENT_LENGTH") or "0"
            limit = max_body_bytes(request.path)
            if declared.isdigit() and int(declared) > limit:
                return error_response(
                    request, ErrorCode.REQUEST_TOO_LARGE, f"Request body is larger than {limit} bytes"
                )
        return self.get_response(request)

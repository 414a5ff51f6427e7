"""/v1/ runs only the middleware the API needs: request id, error envelope, rate limit, security headers.

The console's layers (sessions, CSRF, CSP, messages, clickjacking, axes) are skipped, so an API
response never sets or deletes a cookie, even for a client that also carries the console's cookies;
the console keeps every layer."""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import Client
from django.utils.module_loading import import_string

from apikeys.models import ApiKey
from tests.api.wire import assert_api_error, bearer, inline_body

pytestmark = pytest.mark.django_db

# What a console user's browser may send along: a session the server no longer knows and a CSRF cookie
# of a format Django no longer reads. Through the console's layers the first is deleted and the second
# replaced, each with a Set-Cookie.
CONSOLE_COOKIES = {"sessionid": "stale", "csrftoken": "stale!"}


def _browser() -> Client:
    client = Client()
    for name, value in CONSOLE_COOKIES.items():
        client.cookies[name] = value
    return client


@contextmanager
def _middleware_calls() -> Iterator[dict[str, set[str]]]:
    """The methods of MIDDLEWARE's classes that run in this thread, by class name."""
    classes = {import_string(path) for path in django_settings.MIDDLEWARE}
    calls: dict[str, set[str]] = {}

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        owner = type(frame.f_locals.get("self"))
        if event == "call" and owner in classes:
            calls.setdefault(owner.__name__, set()).add(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


def test_a_v1_request_passes_only_through_the_api_middleware(full_key: ApiKey):
    client = _browser()
    client.get("/healthz")  # builds the middleware chain

    with _middleware_calls() as calls:
        client.post("/v1/send", inline_body(), content_type="application/json", headers=bearer(full_key))

    assert calls == {
        "RequestIdMiddleware": {"__call__"},
        "ApiErrorMiddleware": {"__call__"},
        "SecurityMiddleware": {"__call__", "process_request", "process_response"},
        "RateLimitMiddleware": {"__call__"},
        "CommonMiddleware": {"__call__", "process_request", "process_response"},
        "ConsoleLayers": {"__call__"},
        # Django's view layer calls every process_view hook; CSRF's returns at once for DRF's
        # csrf_exempt views, before reading the request.
        "CsrfViewMiddleware": {"process_view"},
    }


def test_a_console_request_passes_through_every_middleware(db):
    client = Client()
    client.get("/healthz")

    with _middleware_calls() as calls:
        client.get("/admin/login/")

    assert set(calls) == {import_string(path).__name__ for path in django_settings.MIDDLEWARE}


def test_console_layers_without_their_end_is_a_configuration_error(settings):
    settings.MIDDLEWARE = [path for path in settings.MIDDLEWARE if not path.endswith(".ConsoleLayersEnd")]

    with pytest.raises(ImproperlyConfigured, match="ConsoleLayersEnd"):
        Client().get("/healthz")


def _send(client: Client, key: ApiKey, **changes: Any) -> Any:
    return client.post("/v1/send", inline_body(**changes), content_type="application/json", headers=bearer(key))


def _invalid_body(client: Client, key: ApiKey, settings: Any) -> Any:
    return _send(client, key, to="not an address")


def _no_key(client: Client, key: ApiKey, settings: Any) -> Any:
    return client.post("/v1/send", inline_body(), content_type="application/json")


def _unknown_message(client: Client, key: ApiKey, settings: Any) -> Any:
    return client.get("/v1/messages/msg_nope", headers=bearer(key))


def _unknown_path(client: Client, key: ApiKey, settings: Any) -> Any:
    return client.post("/v1/nothing", headers=bearer(key))


def _too_large(client: Client, key: ApiKey, settings: Any) -> Any:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 64
    return _send(client, key, text="x" * 100)


def _rate_limited(client: Client, key: ApiKey, settings: Any) -> Any:
    settings.MAILSERVICE_RATE_LIMIT = "1/h"
    client.get("/v1/messages", headers=bearer(key))
    return client.get("/v1/messages", headers=bearer(key))


ERRORS: dict[str, tuple[Callable[[Client, ApiKey, Any], Any], int, str]] = {
    "invalid body": (_invalid_body, 400, "ValidationError"),
    "no key": (_no_key, 401, "Unauthorized"),
    "unknown message": (_unknown_message, 404, "NotFound"),
    "unknown path": (_unknown_path, 404, "NotFound"),
    "body too large": (_too_large, 413, "RequestTooLarge"),
    "rate limited": (_rate_limited, 429, "RateLimited"),
}


def _assert_api_headers_only(response: Any) -> None:
    assert "Set-Cookie" not in response.headers and not response.cookies
    assert response.headers["x-request-id"].startswith("req_")
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Referrer-Policy"] == "same-origin"
    assert "Content-Security-Policy" not in response.headers and "X-Frame-Options" not in response.headers


def test_a_send_with_the_console_cookies_sets_no_cookie(full_key: ApiKey):
    response = _send(_browser(), full_key)

    assert response.status_code == 200, response.content
    _assert_api_headers_only(response)


@pytest.mark.parametrize("case", ERRORS)
def test_an_api_error_with_the_console_cookies_sets_no_cookie(case: str, full_key: ApiKey, settings):
    request, status, code = ERRORS[case]

    response = request(_browser(), full_key, settings)

    assert_api_error(response, status, code)
    _assert_api_headers_only(response)


def test_hsts_stays_on_the_api_when_configured(full_key: ApiKey, settings):
    settings.SECURE_HSTS_SECONDS = 3600

    response = _browser().get("/v1/messages", headers=bearer(full_key), secure=True)

    assert response.status_code == 200
    assert response.headers["Strict-Transport-Security"] == "max-age=3600"


def test_the_console_keeps_its_cookies_and_headers(db):
    User.objects.create_superuser("ops", password="the-right-passphrase")
    client = _browser()

    page = client.get("/admin/login/")
    signed_in = client.post("/admin/login/", {"username": "ops", "password": "the-right-passphrase", "next": "/admin/"})

    assert page.cookies["csrftoken"].value and page.cookies["csrftoken"].value != "stale!"
    assert "Content-Security-Policy" in page.headers and page.headers["X-Frame-Options"] == "DENY"
    assert signed_in.status_code == 302 and signed_in.cookies["sessionid"].value


def test_axes_still_locks_out_console_sign_ins(db, settings):
    User.objects.create_superuser("ops", password="the-right-passphrase")
    client = Client()
    for n in range(settings.AXES_FAILURE_LIMIT):
        client.post("/admin/login/", {"username": "ops", "password": f"wrong-{n}"})

    locked = client.post("/admin/login/", {"username": "ops", "password": "the-right-passphrase"})

    assert locked.status_code == 429


def test_a_signed_in_console_session_does_not_authenticate_the_api(db):
    client = Client()
    client.force_login(User.objects.create_superuser("ops", password="the-right-passphrase"))

    response = client.get("/v1/messages")

    assert_api_error(response, 401, "Unauthorized")
    assert not response.cookies

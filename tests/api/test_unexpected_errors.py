"""Whatever breaks inside a view, the client gets the ApiError envelope, never a traceback or HTML."""

import logging

import pytest
from django.db import IntegrityError, OperationalError
from django.http import HttpRequest, HttpResponse
from django.urls import path
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from config.urls import urlpatterns as project_urlpatterns
from mailservice.api.permissions import CanRead
from tests.api.wire import assert_api_error
from tests.conftest import client_for

pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

FAILURES = {"bug": ZeroDivisionError, "integrity": IntegrityError, "outage": OperationalError}


class Failing(APIView):
    permission_classes = [CanRead]

    def get(self, request: Request, kind: str) -> Response:
        raise FAILURES[kind]("secret internals: /srv/app/views.py line 42")


def failing_plain_view(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("secret internals")


def html_error_view(request: HttpRequest) -> HttpResponse:
    return HttpResponse("<html><body>Server Error</body></html>", status=502, content_type="text/html")


urlpatterns = [
    path("v1/failing/<str:kind>", Failing.as_view()),
    path("v1/plain-failing", failing_plain_view),
    path("v1/html-error", html_error_view),
    *project_urlpatterns,
]


@pytest.mark.parametrize(
    ("kind", "status", "code"), [("bug", 500, "InternalError"), ("integrity", 500, "InternalError")]
)
def test_an_unexpected_exception_is_a_logged_500_without_internals(full_key, caplog, kind, status, code):
    with caplog.at_level(logging.ERROR, logger="mailservice.api.middleware"):
        response = client_for(full_key).get(f"/v1/failing/{kind}")
    error = assert_api_error(response, status, code)
    assert "secret internals" not in response.content.decode()
    assert error["request_id"] in caplog.text and "secret internals" in caplog.text  # operators get the details


def test_a_database_outage_is_a_503_with_retry_after(full_key):
    response = client_for(full_key).get("/v1/failing/outage")
    assert_api_error(response, 503, "ServiceUnavailable")
    assert response.headers["retry-after"] == "5"


def test_a_plain_django_view_that_raises_is_a_500_envelope(full_key):
    response = client_for(full_key).get("/v1/plain-failing")
    assert_api_error(response, 500, "InternalError")
    assert "secret internals" not in response.content.decode()


def test_a_non_json_error_page_is_replaced_by_the_envelope():
    assert_api_error(client_for(None).get("/v1/html-error"), 502, "InternalError")


def test_django_own_errors_use_the_envelope_too():
    assert_api_error(client_for(None).get("/v1/messages", HTTP_HOST="evil.example"), 400, "BadRequest")

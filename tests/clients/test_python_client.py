"""The Python client without a server: configuration, error mapping, and what it never sends.

A counting TCP listener stands in for the network peer where the test is about how many
connections the client opens (none for invalid input, exactly one for a failed send).
"""

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from mailservice_client import (
    AuthenticationError,
    BadRequestError,
    ConfigurationError,
    InternalServerError,
    MailService,
    MailServiceConnectionError,
    MailServiceError,
    MethodNotAllowedError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
    ServiceUnavailableError,
    ValidationError,
)
from mailservice_client.compat import boto3, postmark, resend, sendgrid
from mailservice_client.errors import error_from_response

VALID = {"from": "a@acme.example.com", "to": "b@example.org", "subject": "Hi", "text": "x"}


@contextmanager
def hanging_up_listener() -> Iterator[tuple[str, list[int]]]:
    """A loopback port that accepts connections, reads the request and closes without answering."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    connections: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            connections.append(1)
            conn.settimeout(5)
            with conn:
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", connections
    finally:
        stop.set()
        thread.join()
        server.close()


def test_a_failed_send_is_never_resent():
    with (
        hanging_up_listener() as (base_url, connections),
        pytest.raises(MailServiceConnectionError) as raised,
        MailService("key", base_url) as client,
    ):
        client.send(VALID)
    assert connections == [1]
    assert raised.value.status is None and "not resent" in raised.value.message


@pytest.mark.parametrize(
    "call",
    [
        lambda client: client.send({**VALID, "to": "not-an-address"}),
        lambda client: client.messages.list(limit=0),
        lambda client: client.messages.list(limit=101),
        lambda client: client.messages.list(after=""),
        lambda client: client.messages.list(after="c" * 513),
        lambda client: client.messages.list(direction="sideways"),
        lambda client: client.messages.get(""),
        lambda client: client.messages.get("m" * 257),
        lambda client: client.send(VALID, idempotency_key=""),
        lambda client: client.send(VALID, idempotency_key="k" * 257),
        lambda client: client.send_batch([]),
        lambda client: client.send_batch([VALID] * 501),
        lambda client: client.send_batch([VALID, {**VALID, "to": "not-an-address"}]),
    ],
    ids=[
        "bad-send",
        "limit-0",
        "limit-101",
        "after-empty",
        "after-513",
        "direction",
        "id-empty",
        "id-257",
        "key-empty",
        "key-257",
        "batch-empty",
        "batch-501",
        "batch-bad-item",
    ],
)
def test_invalid_input_fails_locally_before_any_request(call):
    with (
        hanging_up_listener() as (base_url, connections),
        pytest.raises(ValidationError),
        MailService("key", base_url) as client,
    ):
        call(client)
    assert connections == []


def test_compat_styles_validate_before_any_request(monkeypatch):
    with hanging_up_listener() as (base_url, connections):
        monkeypatch.setattr(resend, "api_key", "key")
        monkeypatch.setattr(resend, "api_url", base_url)
        with pytest.raises(ValidationError, match="scheduled_at"):
            resend.Emails.send({**VALID, "scheduled_at": "tomorrow"})
        with pytest.raises(ValidationError, match="options.idempotency_key"):
            resend.Emails.send(VALID, {"idempotency_key": "é"})
        with pytest.raises(ValidationError, match="options.headers"):
            resend.Emails.send(VALID, {"headers": {"X-Tag": "k"}})
        with pytest.raises(ValidationError, match="helper objects"):
            sendgrid.SendGridAPIClient("key", host=base_url).send(object())  # type: ignore[arg-type]  # the wrong type on purpose
        with pytest.raises(ValidationError, match="EmailTags"):
            boto3.client("sesv2", endpoint_url=base_url, api_key="key").send_email(EmailTags=[])
    assert connections == []


def test_without_a_key_or_base_url_the_client_says_which_is_missing(monkeypatch):
    monkeypatch.delenv("MAILSERVICE_API_KEY", raising=False)
    monkeypatch.delenv("MAILSERVICE_BASE_URL", raising=False)
    with pytest.raises(ConfigurationError, match="MAILSERVICE_API_KEY"):
        MailService(base_url="http://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match="MAILSERVICE_BASE_URL"):
        postmark.ServerClient("key")
    monkeypatch.setenv("MAILSERVICE_API_KEY", "key")
    with pytest.raises(ConfigurationError, match="MAILSERVICE_BASE_URL"):
        sendgrid.SendGridAPIClient()
    with pytest.raises(ConfigurationError, match="http:// or https://"):
        MailService(base_url="mail.example.com")


def test_only_the_sesv2_service_is_provided():
    with pytest.raises(boto3.UnknownServiceError, match="sesv2"):
        boto3.client("ses", endpoint_url="http://127.0.0.1:1", api_key="key")


@pytest.mark.parametrize(
    ("status", "error_class"),
    [
        (400, BadRequestError),
        (401, AuthenticationError),
        (403, PermissionDeniedError),
        (404, NotFoundError),
        (413, RequestTooLargeError),
        (429, RateLimitError),
        (405, MethodNotAllowedError),
        (500, InternalServerError),
        (503, ServiceUnavailableError),
        (418, MailServiceError),
    ],
)
def test_an_envelope_with_an_unknown_code_becomes_the_error_of_its_status(status, error_class):
    body = b'{"error": {"code": "SomeCode", "message": "what happened", "request_id": "req_1"}}'
    error = error_from_response(status, {"X-Request-Id": "req_1", "Retry-After": "7"}, body)
    assert type(error) is error_class
    assert (error.status, error.code, error.message, error.request_id) == (status, "SomeCode", "what happened", "req_1")
    assert str(error) == "SomeCode: what happened (HTTP 500) [request_id=req_1]".replace("500", str(status))


def test_a_body_without_the_envelope_still_gives_status_and_request_id():
    error = error_from_response(502, {"x-request-id": "req_2"}, b"<html>Bad gateway</html>")
    assert (type(error), error.code, error.status, error.request_id) == (
        ServiceUnavailableError,
        "Http502",
        502,
        "req_2",
    )


@pytest.mark.parametrize(("header", "expected"), [("12", 12), ("soon", None), (None, None)])
def test_rate_limit_errors_carry_retry_after(header, expected):
    headers = {"Retry-After": header} if header else {}
    error = error_from_response(429, headers, b'{"error": {"code": "RateLimited", "message": "m", "request_id": "r"}}')
    assert isinstance(error, RateLimitError) and error.retry_after == expected


def test_a_bad_batch_item_is_named_before_any_request():
    with pytest.raises(ValidationError) as raised:
        MailService("key", "http://127.0.0.1:9").send_batch([VALID, VALID, {**VALID, "to": "not-an-address"}])
    assert raised.value.field == "messages.2.to"

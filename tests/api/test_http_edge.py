"""The HTTP edge under hostile clients, against the server the Procfile's `web` line starts: slow
clients do not stall it, deeply nested JSON is a 400, chunked bodies are read (and bounded)."""

import json
import shlex
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import procfile_web, procfile_web_line, wait_until, web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture(scope="module")
def procfile_server(django_db_setup: None, django_db_blocker: Any) -> Iterator[str]:
    """The Procfile's web line, run by a shell as `make start` runs it, on a free $PORT."""
    with django_db_blocker.unblock(), procfile_web() as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture
def key_headers() -> dict[str, str]:
    key = ApiKeyFactory(domain=DomainFactory(name="acme.example.com"))
    return {"Authorization": f"Bearer {key.secret}"}


def _send_body() -> dict[str, Any]:
    return {"from": "Acme <hello@acme.example.com>", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}


def test_the_web_line_honours_port_and_runs_uvicorn_workers():
    line = procfile_web_line()
    assert "${PORT" in line and "config.asgi" in line and "config.workers.WebWorker" in shlex.split(line)


def _slow_client(port: int, stop: threading.Event, opened: list[int]) -> None:
    """A client that sends its request one header line every 2 s and never finishes it."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        opened.append(1)
        line = 0
        while not stop.wait(2):
            sock.sendall(f"X-Slow-{line}: x\r\n".encode())
            line += 1


def test_normal_requests_are_answered_within_a_second_while_8_slow_clients_hold_connections(
    procfile_server, key_headers
):
    port = int(procfile_server.rsplit(":", 1)[1])
    stop, opened = threading.Event(), []
    clients = [threading.Thread(target=_slow_client, args=(port, stop, opened)) for _ in range(8)]
    for client in clients:
        client.start()
    try:
        wait_until(lambda: len(opened) == 8, timeout=10, message="8 slow clients connected")
        time.sleep(2.5)  # each has sent at least one more header line: both workers would be held by now
        timings = []
        for _ in range(10):
            started = time.monotonic()
            response = httpx.get(f"{procfile_server}/v1/messages", headers=key_headers, timeout=10)
            timings.append(time.monotonic() - started)
            assert response.status_code == 200
            time.sleep(0.3)
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert max(timings) < 1.0, timings


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_deeply_nested_json_is_invalid_json_not_a_500(procfile_server, key_headers, depth):
    body = json.dumps(_send_body()).replace('"bob@example.org"', _nested(depth))
    response = httpx.post(
        f"{procfile_server}/v1/send",
        content=body,
        headers=key_headers | {"Content-Type": "application/json"},
        timeout=30,
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] in ("InvalidJson", "ValidationError")
    if depth == 100_000:
        assert response.json()["error"]["code"] == "InvalidJson"


def _chunks(data: bytes, size: int = 1000) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def test_a_chunked_body_is_read(procfile_server, key_headers):
    data = json.dumps(_send_body()).encode()
    headers = key_headers | {"Content-Type": "application/json"}

    response = httpx.post(f"{procfile_server}/v1/send", content=_chunks(data, 10), headers=headers, timeout=30)

    assert response.request.headers["Transfer-Encoding"] == "chunked"
    assert response.status_code == 200, response.text


def test_a_chunked_body_over_the_limit_is_refused_with_413(procfile_server, key_headers):
    data = json.dumps(_send_body() | {"text": "x" * (5 * 1024 * 1024)}).encode()
    headers = key_headers | {"Content-Type": "application/json"}

    response = httpx.post(f"{procfile_server}/v1/send", content=_chunks(data, 65536), headers=headers, timeout=30)

    assert response.status_code == 413
    assert response.json()["error"]["code"] == "RequestTooLarge"


def test_a_wsgi_server_refuses_a_chunked_body_instead_of_reading_it_as_empty(key_headers):
    data = json.dumps(_send_body()).encode()
    with web_server(workers=1, wsgi=True) as url:
        response = httpx.post(
            f"{url}/v1/send", content=_chunks(data, 10), headers=key_headers | {"Content-Type": "application/json"}
        )

    assert response.status_code == 400
    assert "Content-Length" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "body", [b"zz\r\n{}\r\n0\r\n\r\n", b"2\r\n{}XX0\r\n\r\n"], ids=["chunk size not hex", "chunk without its CRLF"]
)
def test_a_malformed_chunked_body_gets_the_json_error_envelope(procfile_server, key_headers, body):
    port = int(procfile_server.rsplit(":", 1)[1])
    head = "POST /v1/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    head += f"Authorization: {key_headers['Authorization']}\r\nTransfer-Encoding: chunked\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head.encode())
        sock.sendall(b'4\r\n{"a"\r\n')  # a first good chunk: the view is reading the body when the bad one comes
        sock.sendall(body)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk

    status_line, _, rest = answer.partition(b"\r\n")
    headers, _, content = rest.partition(b"\r\n\r\n")
    assert status_line.split()[1] == b"400", answer[:300]
    assert b"content-type: application/json" in headers.lower() and b"x-request-id: req_" in headers.lower()
    error = json.loads(content)["error"]
    assert error["code"] == "BadRequest" and error["request_id"].startswith("req_")


def test_a_body_that_stops_coming_is_answered_400_and_frees_its_thread(procfile_server, key_headers):
    port = int(procfile_server.rsplit(":", 1)[1])
    head = "POST /v1/send HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
    head += f"Authorization: {key_headers['Authorization']}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        started = time.monotonic()
        sock.sendall(head.encode() + b'{"from": ')  # then nothing more
        answer = sock.recv(65536)
        waited = time.monotonic() - started
        while not answer.endswith(b"}"):  # the head and the JSON body may come in two reads
            answer += sock.recv(65536)

    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["code"] == "BadRequest"
    assert 9 < waited < 20

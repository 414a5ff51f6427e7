"""bench.load.run_wrk: wrk sends the target's request, one connection each, and its summary reads back right."""

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bench.load import WRK_ERROR_STATUS, make_target, run_wrk


@contextmanager
def http_server(status: int) -> Iterator[tuple[str, list[dict]]]:
    """A loopback HTTP/1.1 server answering every request with `status`; yields its URL and what it received."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keeps connections open unless the client asks otherwise

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append({"method": self.command, "path": self.path, "headers": dict(self.headers), "body": body})
            self.send_response(status)
            if self.headers["Connection"] == "close":
                self.send_header("Connection", "close")  # as gunicorn says it, or wrk counts the close an error
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: object) -> None:  # no access log on the test's stderr
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.live
def test_wrk_sends_the_targets_request_on_a_connection_of_its_own_and_counts_the_answers():
    body = '{"to": "ü@example.org", "text": "\\"]]==]\\n"}'.encode()
    with http_server(200) as (url, received):
        result = run_wrk(
            make_target(url, method="POST", paths=["/v1/send"], token="ms_key", body=body), seconds=1, concurrency=2
        )

    first = received[0]
    assert (first["method"], first["path"], first["body"]) == ("POST", "/v1/send", body)
    assert first["headers"]["Authorization"] == "Bearer ms_key"
    assert first["headers"]["Content-Type"] == "application/json"
    assert first["headers"]["Connection"] == "close"
    # wrk stops with requests in flight: the server may have answered a few it never counted.
    assert 0 < result.ok <= len(received) <= result.ok + 2
    assert result.errors == 0 and result.throughput > 0
    assert len(result.latencies) >= result.ok and 0 < result.percentile_ms(50) <= result.percentile_ms(99)
    assert result.client_cpu_seconds > 0 and result.client_cpu_ms > 0


@pytest.mark.live
def test_wrk_counts_error_statuses_as_failed_requests():
    with http_server(503) as (url, _):
        result = run_wrk(
            make_target(url, method="POST", paths=["/v1/send"], token="k", body=b"{}"), seconds=1, concurrency=1
        )

    assert result.ok == 0 and result.errors > 0
    assert set(result.statuses) == {WRK_ERROR_STATUS}
    assert result.describe_errors() == f"{result.errors}× 4xx or 5xx"

"""The production web server's worker class: gunicorn supervises processes running uvicorn.

An event loop holds each connection, so a client that sends its request slowly (one header line
every few seconds) costs a socket and a coroutine, not a whole worker as with gunicorn's sync
workers; Django then runs the request in a fixed thread pool (config/asgi.py) once its head has arrived,
and reads the body only as a view asks for it.
"""

import gc
import json
import secrets
from typing import Any

import h11
from django.urls import get_resolver
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn_worker import UvicornWorker

from mailservice.errors import ErrorCode


class ApiErrorH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1, answering a request it cannot parse (a malformed chunked body, a broken request
    line) with the API's error envelope, as every other error, instead of uvicorn's plain-text 400."""

    def send_400_response(self, msg: str) -> None:
        if self.cycle is not None:
            # The application may be running (it reads the body as it comes): it now finds the client gone.
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        if self.conn.our_state is not h11.SEND_RESPONSE:  # the application has already answered
            self.transport.close()
            return
        request_id = "req_" + secrets.token_hex(12)
        error = {"code": ErrorCode.BAD_REQUEST.value, "message": msg, "request_id": request_id}
        body = json.dumps({"error": error}).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"x-request-id", request_id.encode()),
            (b"cache-control", b"no-store"),
            (b"connection", b"close"),
        ]
        self.transport.write(self.conn.send(h11.Response(status_code=400, headers=headers, reason=b"Bad Request")))
        self.transport.write(self.conn.send(h11.Data(data=body)))
        self.transport.write(self.conn.send(h11.EndOfMessage()))
        self.transport.close()


class WebWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {
        "loop": "asyncio",
        "http": ApiErrorH11Protocol,
        # Client addresses come from the project's own X-Forwarded-For handling
        # (MAILSERVICE_TRUSTED_PROXIES), never from uvicorn's: it would believe loopback peers.
        "proxy_headers": False,
        "server_header": False,
        # Bounds on what a connection may hold: request line and headers, then the whole body
        # (the API's 4 MiB plus room for the admin's forms) is also capped in config/asgi.py.
        "h11_max_incomplete_event_size": 64 * 1024,
    }

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # Everything loaded so far (Django, the apps, and the URLconf's views, imported here rather
        # than by the first request) lives as long as the process: frozen, the garbage collector's
        # full collections no longer walk its ~130 000 objects. Unfrozen, each took 90-160 ms with
        # every thread of the worker stopped (bench/results/before-after-round-seven.md).
        get_resolver().url_patterns  # noqa: B018 - imports every view
        gc.freeze()

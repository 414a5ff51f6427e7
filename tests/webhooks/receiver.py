"""A webhook receiver on loopback: a real threaded HTTP server that records each request and
answers as the test says (a status per request, a delay, or a hold)."""

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from standardwebhooks import Webhook


@dataclass
class Request:
    headers: dict[str, str]
    body: str
    at: float  # time.monotonic() when it arrived

    @property
    def event(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Behaviour:
    statuses: list[int] = field(default_factory=list)  # answered in order, then 200
    delay: float = 0.0  # seconds before answering
    hold: threading.Event | None = None  # answer only once this is set


class Receiver:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.requests: list[Request] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's hook
                body = self.rfile.read(int(self.headers["Content-Length"])).decode()
                with receiver.lock:
                    receiver.requests.append(Request(dict(self.headers.items()), body, time.monotonic()))
                    status = receiver.behaviour.statuses.pop(0) if receiver.behaviour.statuses else 200
                if receiver.behaviour.hold is not None:
                    receiver.behaviour.hold.wait(60)
                time.sleep(receiver.behaviour.delay)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"

    def events(self, type_: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            found = [request.event for request in self.requests]
        return [event for event in found if type_ is None or event["type"] == type_]

    def verified(self, secret: str) -> list[dict[str, Any]]:
        """Every request so far, each verified with the standardwebhooks package (raises if one does not)."""
        with self.lock:
            requests = list(self.requests)
        return [Webhook(secret).verify(request.body, request.headers) for request in requests]


@contextmanager
def webhook_receiver() -> Iterator[Receiver]:
    receiver = Receiver()
    thread = threading.Thread(target=receiver.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        if receiver.behaviour.hold is not None:
            receiver.behaviour.hold.set()
        receiver.server.shutdown()
        receiver.server.server_close()

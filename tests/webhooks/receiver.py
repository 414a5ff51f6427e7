"""A webhook receiver on loopback: a real threaded HTTP server that records each request and
answers as the test says (a status per request, a delay, or a hold); and a receiver that trickles
its answer a byte at a time."""

import json
import select
import socket
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


@dataclass
class Connection:
    opened: float  # time.monotonic()
    closed: float | None = None
    closed_by_client: bool = False


class TricklingReceiver:
    """A receiver that reads the request, then answers one byte every `interval` seconds (a status
    line that never ends within the test). It records when each connection opened and when the
    client closed it, and the most connections it ever had open at once."""

    def __init__(self, *, interval: float, answer_bytes: int = 200) -> None:
        self.interval = interval
        self.answer = b"HTTP/1.1 200 " + b"O" * answer_bytes + b"\r\nContent-Length: 0\r\n\r\n"
        self.connections: list[Connection] = []
        self.open_now = self.most_open = 0
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/slow"

    def serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                record = Connection(opened=time.monotonic())
                self.connections.append(record)
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
            threading.Thread(target=self._trickle, args=(conn, record), daemon=True).start()

    def _trickle(self, conn: socket.socket, record: Connection) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                request += chunk
            for byte in self.answer:
                readable, _, _ = select.select([conn], [], [], self.interval)
                if self.stopping.is_set():
                    break
                try:
                    if readable and not conn.recv(65536):
                        record.closed_by_client = True
                        break
                    conn.sendall(bytes([byte]))
                except OSError:
                    record.closed_by_client = True
                    break
        with self.lock:
            record.closed = time.monotonic()
            self.open_now -= 1


@contextmanager
def trickling_receiver(*, interval: float) -> Iterator[TricklingReceiver]:
    receiver = TricklingReceiver(interval=interval)
    thread = threading.Thread(target=receiver.serve, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        receiver.stopping.set()
        receiver.listener.close()

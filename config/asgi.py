"""The application the Procfile's web process serves (gunicorn with config.workers.WebWorker).

uvicorn's event loop holds each connection and reads the whole request, headers and body, before
anything else runs: a slow client costs a socket, not a thread. `BodyLimit` reads the body (at most
DATA_UPLOAD_MAX_MEMORY_SIZE, or MAILSERVICE_BATCH_MAX_BYTES for a batch of sends; past it 413
`RequestTooLarge`; a chunked body is handed on with its
length, which DRF needs), then Django runs as a WSGI application in a fixed pool of WEB_THREADS
threads per process (a2wsgi). Django's own ASGI handler instead started a thread per request: a send
cost 5.0–7.2 ms of CPU against 3.7 this way (bench/results/before-after-web-server.md), and each
thread's persistent database connection outlived it, so under load the open connections grew past
PostgreSQL's max_connections. Here each pool thread keeps one, as a sync worker would.
"""

import json
import os
import secrets
from collections.abc import Callable
from typing import Any

from a2wsgi import WSGIMiddleware
from django.core.wsgi import get_wsgi_application

from config.startup import WORKER_BOOT_ERROR, one_line_errors

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
with one_line_errors("web", status=WORKER_BOOT_ERROR):
    wsgi_application = get_wsgi_application()
# django-stubs type the handler's response as HttpResponseBase, which is the iterable of bytes WSGI wants.
django_application = WSGIMiddleware(
    wsgi_application,  # type: ignore[arg-type]
    workers=int(os.environ.get("WEB_THREADS", "8")),
)

from mailservice.api.middleware import max_body_bytes  # noqa: E402 - needs the settings module chosen above
from mailservice.errors import ErrorCode  # noqa: E402

Scope = dict[str, Any]
Message = dict[str, Any]


class BodyLimit:
    """Reads the whole body before the application runs, up to the limit `limit_of` gives for the request's path."""

    def __init__(self, app: Any, *, limit_of: Callable[[str], int]) -> None:
        self.app, self.limit_of = app, limit_of

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        # Read until past the limit even when the declared length is already over it: a proxy in front
        # that is still sending the body would take an early answer and close as a failed upstream (502).
        limit = self.limit_of(scope["path"])
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                await _too_large(send, limit)
                return
            if not message.get("more_body", False):
                break
        # Handed on with its length: DRF takes a request without one (a chunked one) as having no body.
        headers = [(name, value) for name, value in scope["headers"] if name not in _LENGTH_HEADERS]
        headers.append((b"content-length", str(size).encode()))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # the disconnect, once the response is sent
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope | {"headers": headers}, replay, send)


_LENGTH_HEADERS = {b"content-length", b"transfer-encoding"}


async def _too_large(send: Any, limit: int) -> None:
    request_id = "req_" + secrets.token_hex(12)
    error = {"code": ErrorCode.REQUEST_TOO_LARGE.value, "message": f"Request body is larger than {limit} bytes"}
    body = json.dumps({"error": error | {"request_id": request_id}}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"x-request-id", request_id.encode()),
        (b"cache-control", b"no-store"),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": 413, "headers": headers})
    await send({"type": "http.response.body", "body": body})


application = BodyLimit(django_application, limit_of=max_body_bytes)

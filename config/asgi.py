"""The ASGI application the Procfile's web process serves (gunicorn with config.workers.WebWorker).

Django reads a request body into a temporary file before the view runs, with no bound when the
client sends it chunked (no Content-Length to check), and DRF then reads a body without
Content-Length as empty. `BodyLimit` reads a chunked body itself, up to DATA_UPLOAD_MAX_MEMORY_SIZE
(past it: 413 `RequestTooLarge`, as the API answers a declared length), and hands it on with its length.
"""

import json
import os
import secrets
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django_application = get_asgi_application()

from django.conf import settings  # noqa: E402 - needs the settings module chosen above

from mailservice.errors import ErrorCode  # noqa: E402

Scope = dict[str, Any]
Message = dict[str, Any]


class _TooLarge(Exception):
    pass


class BodyLimit:
    def __init__(self, app: Any, *, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if any(name == b"content-length" for name, _ in scope["headers"]):
            await self._bounded(scope, receive, send)
        else:
            await self._with_length(scope, receive, send)

    async def _bounded(self, scope: Scope, receive: Any, send: Any) -> None:
        """A declared length: the API checks it before reading; the bytes that arrive are capped too."""
        received = 0

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counted_receive, send)
        except _TooLarge:
            await _too_large(send, self.limit)

    async def _with_length(self, scope: Scope, receive: Any, send: Any) -> None:
        """A chunked body (or none), read first, then passed on with its Content-Length: DRF takes a
        request without one as having no body, so a chunked send would be read as empty."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await _too_large(send, self.limit)
                return
            if not message.get("more_body", False):
                break
        headers = [(name, value) for name, value in scope["headers"] if name != b"transfer-encoding"]
        if size:
            headers.append((b"content-length", str(size).encode()))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # the disconnect, once the response is sent
            replayed = True
            return {"type": "http.request", "body": b"".join(chunks), "more_body": False}

        await self.app(scope | {"headers": headers}, replay, send)


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


application = BodyLimit(django_application, limit=settings.DATA_UPLOAD_MAX_MEMORY_SIZE)

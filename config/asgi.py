"""The application the Procfile's web process serves (gunicorn with config.workers.WebWorker).

uvicorn's event loop holds each connection and reads its request line and headers before anything
else runs: a slow client costs a socket, not a thread. Django then runs as a WSGI application in a
fixed pool of WEB_THREADS threads per process (a2wsgi), and reads the body only when a view asks for
it, after the middleware has counted the request against the rate limit and the view has checked
the key: a request refused for either is answered without a byte of its body read (uvicorn then
discards whatever the client still sends). A body that stops coming frees its thread after
BODY_IDLE_SECONDS. `BodyLimit` holds what is read to the path's limit
(DATA_UPLOAD_MAX_MEMORY_SIZE, or MAILSERVICE_BATCH_MAX_BYTES for a batch of sends; past it 413
`RequestTooLarge`). Django's own ASGI handler instead started a thread per request: a send cost
5.0–7.2 ms of CPU against 3.7 this way (bench/results/before-after-web-server.md), and each thread's
persistent database connection outlived it, so under load the open connections grew past
PostgreSQL's max_connections. Here each pool thread keeps one, as a sync worker would.
"""

import asyncio
import os
from collections.abc import Callable
from typing import Any

from a2wsgi import WSGIMiddleware
from django.core.exceptions import BadRequest, RequestDataTooBig
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

Scope = dict[str, Any]
Message = dict[str, Any]

# A view reading the body holds one of the WEB_THREADS threads: a client that stops sending its body
# (after the key was checked) is answered 400 once none of it has come for this long, as nginx's
# client_body_timeout. A reverse proxy that buffers bodies never lets one trickle in.
BODY_IDLE_SECONDS = 10


class BodyLimit:
    """Lets the application read the body as it asks for it, up to the limit `limit_of` gives for the path.

    A declared Content-Length over the limit is refused by RateLimitMiddleware before anything is read;
    h11 holds the body to the length declared. A chunked body has no length, and Django and DRF read a
    body only up to CONTENT_LENGTH: it is handed on with the limit as its length (the most it may be),
    and collected whole, within the limit, when the application first asks for it.
    """

    def __init__(self, app: Any, *, limit_of: Callable[[str], int]) -> None:
        self.app, self.limit_of = app, limit_of

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_of(scope["path"])
        names = {name for name, _ in scope["headers"]}
        chunked = b"transfer-encoding" in names and b"content-length" not in names
        received = 0

        async def bounded() -> Message:
            nonlocal received
            try:
                message = await asyncio.wait_for(receive(), BODY_IDLE_SECONDS)
            except TimeoutError:
                raise BadRequest(f"No byte of the body arrived for {BODY_IDLE_SECONDS} s") from None
            if message["type"] == "http.disconnect":
                # a2wsgi would hand the application a truncated body as if it were whole.
                raise BadRequest("The client closed the connection before the end of its body")
            received += len(message.get("body", b""))
            if received > limit:
                raise RequestDataTooBig(f"Request body is larger than {limit} bytes")
            return message

        async def whole() -> Message:
            chunks = [await bounded()]
            while chunks[-1].get("more_body", False):
                chunks.append(await bounded())
            return {"type": "http.request", "body": b"".join(chunk["body"] for chunk in chunks), "more_body": False}

        if not chunked:
            await self.app(scope, bounded, send)
            return
        headers = [(name, value) for name, value in scope["headers"] if name != b"transfer-encoding"]
        headers.append((b"content-length", str(limit).encode()))
        await self.app(scope | {"headers": headers}, whole, send)


application = BodyLimit(django_application, limit_of=max_body_bytes)

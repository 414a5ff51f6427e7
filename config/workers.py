"""The production web server's worker class: gunicorn supervises processes running uvicorn.

An event loop holds each connection, so a client that sends its request slowly (one header line
every few seconds) costs a socket and a coroutine, not a whole worker as with gunicorn's sync
workers; Django then runs the request in a fixed thread pool (config/asgi.py) once it has fully arrived.
"""

import gc
from typing import Any

from django.urls import get_resolver
from uvicorn_worker import UvicornWorker


class WebWorker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {
        "loop": "asyncio",
        "http": "h11",
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

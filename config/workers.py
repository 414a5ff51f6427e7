"""The production web server's worker class: gunicorn supervises processes running uvicorn.

An event loop holds each connection, so a client that sends its request slowly (one header line
every few seconds) costs a socket and a coroutine, not a whole worker as with gunicorn's sync
workers; Django then runs the request in a fixed thread pool (config/asgi.py) once it has fully arrived.
"""

from typing import Any

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

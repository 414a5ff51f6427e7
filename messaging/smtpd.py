"""What the asyncio SMTP servers (inbound, submission) share: database work in worker threads (the ORM
is synchronous: run on the event loop, one slow query would stall every session), and serving until
a signal."""

import asyncio
import gc
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import close_old_connections

P = ParamSpec("P")
R = TypeVar("R")


CONNECTION_CHECK_SECONDS = 1.0
_checked = threading.local()  # when each worker thread's connection is next checked


def with_connection(function: Callable[P, R]) -> Callable[P, R]:
    """An ORM call made with a healthy connection (as Django does around a request), for a worker thread."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        # Django checks the connection before each request (CONN_HEALTH_CHECKS) and replaces it once
        # older than CONN_MAX_AGE. Checked before every call, that was one more round trip per message;
        # once a second per thread still catches a connection that died while idle before it is used.
        now = time.monotonic()
        if now >= getattr(_checked, "next", 0.0):
            close_old_connections()
            _checked.next = now + CONNECTION_CHECK_SECONDS
        try:
            return function(*args, **kwargs)
        except Exception:
            close_old_connections()  # a connection that failed is dropped, not used for the next message
            raise

    return run


def in_thread(function: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Run an ORM call in a worker thread, with a healthy connection."""
    return sync_to_async(with_connection(function), thread_sensitive=False)


async def serve_until_signalled(server: asyncio.AbstractServer, *, ready: Callable[[], None]) -> None:
    """Call `ready`, serve until SIGTERM or SIGINT, then stop accepting and let open sessions finish."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    # What start-up loaded lives as long as the server: frozen, the garbage collector's full
    # collections stop walking it with every session paused (as in the web worker, config/workers.py).
    gc.freeze()
    ready()
    await stop.wait()
    server.close()
    await server.wait_closed()

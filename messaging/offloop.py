"""Database work of the asyncio SMTP servers (inbound, submission), done in worker threads.

The ORM is synchronous: run on the event loop, one slow query would stall every session."""

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


def in_thread(function: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Run an ORM call in a worker thread, with a healthy connection (as Django does around a request)."""

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

    return sync_to_async(run, thread_sensitive=False)

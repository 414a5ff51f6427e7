"""Single-flight sections across processes: PostgreSQL advisory locks."""

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection


@contextmanager
def single_flight(name: str) -> Iterator[bool]:
    """Yields True to the one caller (in any process) holding `name` now, False to the others, who
    should skip the work. A session lock: released on exit, or by PostgreSQL when the process dies.
    SQLite (the embedded mode, one process) always yields True."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [key])
        (held,) = cursor.fetchone()
    try:
        yield held
    finally:
        if held:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [key])

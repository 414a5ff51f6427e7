"""Single-flight sections across processes: PostgreSQL advisory locks."""

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

from django.db import DEFAULT_DB_ALIAS, connection, connections


@contextmanager
def single_flight(name: str) -> Iterator[bool]:
    """Yields True to the one caller (in any process) holding `name` now, False to the others, who
    should skip the work. SQLite (the embedded mode, one process) always yields True.

    The lock is transaction-scoped, held by a transaction on a connection of its own while the section
    runs: behind a transaction-pooling PgBouncer a session lock's unlock may reach another server
    session and leave the lock held for ever, and the section's own writes must commit as they go.
    It ends with the section, or when PostgreSQL sees the process's connection close. Opening that connection
    costs about 2 ms of the caller's CPU (and a backend start without a pooler): sections are rare (the
    webhooks pump, once a second)."""
    if connection.vendor != "postgresql":
        yield True
        return
    key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
    holder = connections.create_connection(DEFAULT_DB_ALIAS)
    try:
        holder.ensure_connection()
        with holder.connection.transaction():
            (held,) = holder.connection.execute("SELECT pg_try_advisory_xact_lock(%s)", [key]).fetchone()
            yield held
    finally:
        holder.close()

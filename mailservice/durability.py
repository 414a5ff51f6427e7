"""The no-loss promise rests on PostgreSQL's own: a committed send survives a crash only with `fsync`
and `synchronous_commit` on. A server set up for speed (a test cluster, a tuned benchmark) turns them
off, so the readiness check and the dispatch worker refuse such a server unless the operator says so
with MAILSERVICE_ALLOW_UNSAFE_DURABILITY=true."""

from django.conf import settings
from django.db import connection

# Each setting, and the values of it under which a committed transaction can be lost in a crash.
_UNSAFE_VALUES = {"fsync": {"off"}, "synchronous_commit": {"off"}}


def unsafe_durability_settings() -> list[str]:
    """`name=value` for each durability setting PostgreSQL has off for this connection's sessions (a
    role or database may override synchronous_commit), in name order; [] when the promise holds, when
    the operator allowed it, or on SQLite (the embedded mode, which has no such switch)."""
    if connection.vendor != "postgresql" or settings.MAILSERVICE_ALLOW_UNSAFE_DURABILITY:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s) ORDER BY name", [list(_UNSAFE_VALUES)]
        )
        rows = cursor.fetchall()
    return [f"{name}={value}" for name, value in rows if value in _UNSAFE_VALUES[name]]


def unsafe_durability_message(unsafe: list[str]) -> str:
    """What to tell the operator about `unsafe` (from unsafe_durability_settings), in one line."""
    return (
        f"PostgreSQL runs with {', '.join(unsafe)}: a crash could lose accepted mail;"
        " turn it on, or set MAILSERVICE_ALLOW_UNSAFE_DURABILITY=true to accept that"
    )

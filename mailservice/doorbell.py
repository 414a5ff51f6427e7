"""The dispatchers' doorbell: a PostgreSQL NOTIFY that wakes the workers' dispatch loops.

It lives in the kernel because apps below messaging ring it too (lifting a domain's pause makes its
queued mail due), and the kernel is the one place every app may import. The loops that listen are
messaging's (messaging/outbound/loop.py); the statement that stores a send rings it in SQL
(messaging/sql.py).
"""

from django.db import connection

CHANNEL = "mailservice_dispatch"


def wake_dispatchers() -> None:
    """Notify the listening workers on the current connection, at its commit: messages became due
    other than by a send (a pause lifted, a bulk insert). Nothing to do elsewhere than on PostgreSQL."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_notify(%s, '')", [CHANNEL])

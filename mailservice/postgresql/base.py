"""Django's PostgreSQL backend, with a health check (CONN_HEALTH_CHECKS) that costs no round trip.

Django checks a persistent connection before a request's first query with `SELECT 1`. That round
trip cost the web server 0.9 ms of CPU and PostgreSQL 0.2 ms per send, an eighth of the accept
path (bench/results/before-after-accept-round-four.md). A connection that is idle between requests
has nothing to read: PostgreSQL writes to it unasked only to say it is ending it (a restart, a
terminated backend) before it closes it, and then the socket reads as ready. So looking at the
socket without waiting tells what the query told, for the ways a connection is lost that the
query could tell without waiting for a timeout.
"""

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus


class DatabaseWrapper(base.DatabaseWrapper):
    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.info.transaction_status != TransactionStatus.IDLE:
            return super().is_usable()  # not between requests: no idle socket to look at
        idle = select.poll()
        idle.register(connection.fileno(), select.POLLIN)
        return not idle.poll(0)

"""Django's PostgreSQL backend, with a health check (CONN_HEALTH_CHECKS) that costs no round trip,
and the project's own statements prepared.

Django checks a persistent connection before a request's first query with `SELECT 1`. That round
trip cost the web server 0.9 ms of CPU and PostgreSQL 0.2 ms per send, an eighth of the accept
path (bench/results/before-after-accept-round-four.md). A connection that is idle between requests
has nothing to read: PostgreSQL writes to it unasked only to say it is ending it (a restart, a
terminated backend) before it closes it, and then the socket reads as ready. So looking at the
socket without waiting tells what the query told, for the ways a connection is lost that the
query could tell without waiting for a timeout.

Django turns psycopg's prepared statements off, for transaction-pooling proxies. Its own cursors
bind on the client and never prepare, so the threshold set here reaches only the statements of
messaging/sql.py, which bind on the server: once one of them has run twice on a connection it is
prepared, and from then on PostgreSQL neither parses nor plans it again. Parsing and planning were
most of their cost to PostgreSQL: in the dispatch benchmark its CPU per message fell from 0.76 ms
to 0.49 ms (bench/results/before-after-round-six.md). OPTIONS["prepare_threshold"] still wins.
"""

import select

from django.db.backends.postgresql import base
from psycopg.pq import TransactionStatus

PREPARE_THRESHOLD = 2


class DatabaseWrapper(base.DatabaseWrapper):
    def get_connection_params(self) -> dict:
        params = super().get_connection_params()
        if "prepare_threshold" not in self.settings_dict["OPTIONS"]:
            params["prepare_threshold"] = PREPARE_THRESHOLD
        return params

    def is_usable(self) -> bool:
        connection = self.connection
        if connection is None or connection.closed or connection.broken:
            return False
        if connection.info.transaction_status != TransactionStatus.IDLE:
            return super().is_usable()  # not between requests: no idle socket to look at
        idle = select.poll()
        idle.register(connection.fileno(), select.POLLIN)
        return not idle.poll(0)

"""The relay named by EMAIL_URL (smtp://, smtp+tls://, smtps://; messaging/outbound/smtp_client.py):
a small per-process pool of open connections, each checked with NOOP before it is reused, shared by
the process's threads. A connection that fails its NOOP is closed and another opened; the relay's
limits shared by the fleet are messaging/outbound/fleet_limits.py's, taken by dispatch.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from messaging.outbound.envelope import Connection
from messaging.outbound.smtp_client import RelayConfig, SmtpConnection


class SmtpTransport:
    """A small per-process pool of open relay connections, checked with NOOP before reuse."""

    def __init__(self, config: RelayConfig, *, timeout: float, pool_size: int) -> None:
        self.config, self.timeout, self.pool_size = config, timeout, pool_size
        self.host = config.host
        self._idle: list[SmtpConnection] = []
        self._lock = threading.Lock()

    def _acquire(self) -> SmtpConnection:
        while True:
            with self._lock:
                idle = self._idle.pop() if self._idle else None
            if idle is None:
                return SmtpConnection(self.config, self.timeout)
            if idle.alive():
                return idle
            idle.close()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A connection for a batch; it returns to the pool only if the batch raised nothing."""
        conn = self._acquire()
        try:
            yield conn
        except BaseException:
            conn.close()
            raise
        with self._lock:
            if len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

"""The dispatch loop: a worker's threads that send accepted messages as soon as they are committed.

On PostgreSQL, the statement that stores a send (messaging/sql.py) ends with NOTIFY on CHANNEL
(mailservice/doorbell.py), which PostgreSQL delivers at commit, and only then, to every connection
listening on the database. Each Celery worker that consumes the default queue runs one DispatchLoop
(config/celery.py): a connection of its own LISTENs, and every notification wakes an idle thread,
which claims and sends batches until a claim comes back short of a full batch. The web thus publishes
no Celery task per message, which was a fifth of the machine's CPU per send
(bench/results/before-after-accept-round-four.md).

LISTEN is session state, which a transaction-pooling PgBouncer does not keep: behind one
(DATABASE_POOLER=pgbouncer) the loop listens on DATABASE_DIRECT_URL, a connection straight to
PostgreSQL, or without it wakes a thread every POLL_SECONDS instead (one claim a second per worker).

A notification sent while no worker listens is not kept. So a loop drains whatever is due when it
starts and after it reconnects, and the sweeper (beat, every MAILSERVICE_DISPATCH_SWEEP_INTERVAL)
still queues anything left behind, as it does for retries.
"""

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import psycopg
from django.conf import settings
from django.db import close_old_connections, connections

from mailservice.doorbell import CHANNEL

if TYPE_CHECKING:
    from messaging.outbound.dispatch import BatchCounts

logger = logging.getLogger(__name__)

LISTENER_APPLICATION_NAME = "mailservice dispatch listener"  # how it shows in pg_stat_activity
RECONNECT_SECONDS = (0.5, 1, 2, 5, 10)  # backoff after a lost listening connection, then every 10 s
POLL_SECONDS = 1.0  # how often the threads look at the stop flag while nothing arrives (and wake, polling)


def listening_database() -> dict[str, Any] | None:
    """What the listening connection changes in the default database's settings: DATABASE_DIRECT_URL's,
    nothing when PostgreSQL is reached directly, or None behind a pooler without a direct URL (poll)."""
    if settings.DATABASE_LISTEN is not None:
        return settings.DATABASE_LISTEN
    return None if settings.DATABASE_POOLER != "none" else {}


class DispatchLoop:
    """`threads` threads running `dispatch` (one batch of up to `batch_size`) when woken, and one thread
    listening for the notifications that wake them. A full batch wakes one more thread, so a backlog
    behind a single notification is drained by all of them."""

    def __init__(
        self,
        *,
        threads: int,
        dispatch: Callable[[], "BatchCounts"],
        batch_size: int,
        listen_to: dict[str, Any] | None,
    ) -> None:
        self._dispatch, self._batch_size, self._listen_to = dispatch, batch_size, listen_to
        self._wakeup = threading.Condition()
        # Guarded by _wakeup: how many notifications have come, and whether one came that no thread
        # has yet taken up (a thread that takes it up claims after it, which covers it).
        self._notifications, self._waiting = 0, False
        self._stopping = threading.Event()
        self._threads = [
            threading.Thread(target=self._listen, name="dispatch-listener", daemon=True),
            *(threading.Thread(target=self._send, name=f"dispatch-{n}", daemon=True) for n in range(1, threads + 1)),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Stop waking threads, and wait for the batches in progress to end."""
        self._stopping.set()
        with self._wakeup:
            self._wakeup.notify_all()
        for thread in self._threads:
            thread.join()

    def _notify(self) -> None:
        with self._wakeup:
            self._notifications += 1
            self._waiting = True
            self._wakeup.notify()

    def _listen(self) -> None:
        if self._listen_to is None:
            self._poll()
            return
        failures = 0
        while not self._stopping.is_set():
            wrapper = connections.create_connection("default")  # a connection of its own, outside Django's
            database = {**wrapper.settings_dict, **self._listen_to}  # a copy: the setting is shared
            options = {**database.get("OPTIONS", {}), "application_name": LISTENER_APPLICATION_NAME}
            wrapper.settings_dict = {**database, "OPTIONS": options}
            try:
                wrapper.ensure_connection()
                listening: psycopg.Connection = wrapper.connection
                listening.execute(f"LISTEN {CHANNEL}")
                failures = 0
                self._notify()  # what was committed while nobody listened
                while not self._stopping.is_set():
                    for _ in listening.notifies(timeout=POLL_SECONDS):
                        self._notify()
            except Exception:
                delay = RECONNECT_SECONDS[min(failures, len(RECONNECT_SECONDS) - 1)]
                failures += 1
                logger.exception("dispatch: the listening connection failed; listening again in %s s", delay)
                self._stopping.wait(delay)
            finally:
                wrapper.close()

    def _poll(self) -> None:
        """No connection can listen: wake a thread every POLL_SECONDS, as a notification would."""
        while not self._stopping.is_set():
            self._notify()
            self._stopping.wait(POLL_SECONDS)

    def _send(self) -> None:
        while True:
            with self._wakeup:
                while not self._waiting and not self._stopping.is_set():
                    self._wakeup.wait(POLL_SECONDS)
                if self._stopping.is_set():
                    return
                self._waiting = False
            self._drain()

    def _drain(self) -> None:
        """Send batches until a claim that began after the last notification comes back short of a full
        batch (nothing else was due), or one records nothing (all held or given back: not due again at
        once, so no thread spins on them). A notification that comes meanwhile is covered by the next
        batch, of this thread or of one it wakes."""
        while True:
            with self._wakeup:
                began_after = self._notifications
            close_old_connections()
            try:
                counts = self._dispatch()
                claimed, recorded = counts.claimed, counts.recorded
                if recorded:
                    logger.info("dispatch: a woken batch recorded %d messages", recorded)
            except Exception:
                logger.exception("dispatch: a batch failed; its messages go back once their lease ends")
                claimed = recorded = 0
                self._stopping.wait(POLL_SECONDS)
            backlog = claimed >= self._batch_size and recorded > 0
            with self._wakeup:
                if self._stopping.is_set():
                    return
                if backlog:  # perhaps behind a single notification: another thread joins
                    self._waiting = True
                    self._wakeup.notify()
                elif self._notifications == began_after:
                    return

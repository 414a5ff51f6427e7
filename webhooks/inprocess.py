"""Webhooks without a broker (the embedded mode of `make run`): one background thread of the web process
does what beat's `webhooks.pump` and the webhooks worker do otherwise, through the same services.

The thread is started by the first request the process finishes (so `migrate`, other commands and
runserver's reloader parent never start one) and is woken after every request, when the events it
committed (a send's `accepted`, and the dispatch outcome that runs in-process right after) are in the
database; it also wakes every MAILSERVICE_WEBHOOK_PUMP_INTERVAL for retries and for events written by
other processes. Wake-ups coalesce, so the queue is one pending round. Every delivery is claimed under a
lease right before its request and recorded by the lease holder, exactly as on the webhooks worker: a
second web process's thread takes other deliveries, and one killed mid-request leaves a lease that runs
out, after which the delivery is sent again.
"""

import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import close_old_connections

from webhooks import services

logger = logging.getLogger(__name__)

# A round stops taking deliveries after this long (plus one request's timeout), so the events that
# arrived meanwhile are fanned out without waiting for a long backlog to drain.
ROUND_BUDGET_SECONDS = 30.0
# Fanning a backlog of events out yields to the deliveries after this long; the next round carries on.
FAN_OUT_BUDGET_SECONDS = 1.0


def deliveries_round() -> int:
    """Fan new events out, then send due deliveries one at a time, taking the endpoints in turn; returns
    how many were sent.

    Each delivery is claimed just before its request, so no lease waits behind another endpoint's
    slow request: a lease is MAILSERVICE_WEBHOOK_LEASE_SECONDS, a request at most the timeout."""
    started = time.monotonic()
    while services.events_fan_out() and time.monotonic() < started + FAN_OUT_BUDGET_SECONDS:
        pass
    sent, deadline = 0, started + ROUND_BUDGET_SECONDS
    claimed_any = True
    while claimed_any and time.monotonic() < deadline:
        claimed_any = False
        for endpoint_id in services.endpoints_due():
            for delivery in services.deliveries_claim(endpoint_id=endpoint_id, limit=1):
                claimed_any = True
                sent += services.delivery_attempt(delivery=delivery)
            if time.monotonic() >= deadline:
                break
    return sent


class InProcessDeliverer:
    """One daemon thread running `deliveries_round` when woken, or every pump interval once started."""

    def __init__(self) -> None:
        self._woken = threading.Event()
        self._starting = threading.Lock()
        self._thread: threading.Thread | None = None

    def wake(self) -> None:
        with self._starting:
            # Not alive after a fork too: a forked child starts its own thread.
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="webhooks-in-process", daemon=True)
                self._thread.start()
        self._woken.set()

    def _run(self) -> None:
        while True:
            self._woken.wait(settings.MAILSERVICE_WEBHOOK_PUMP_INTERVAL)
            self._woken.clear()
            try:
                deliveries_round()
            except Exception:  # a locked or unreachable database: the next round tries again
                logger.exception("webhooks: an in-process round failed")
            finally:
                close_old_connections()


deliverer = InProcessDeliverer()


def request_finished_wake(sender: Any, **kwargs: Any) -> None:
    """The request_finished receiver: whatever the request committed is fanned out and sent."""
    deliverer.wake()

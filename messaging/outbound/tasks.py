"""Celery tasks for dispatch: thin wrappers around messaging/outbound/dispatch.py.

acks_late with reject_on_worker_lost (config/settings.py): a worker killed mid-task leaves the
task to be redelivered, and the claim in dispatch makes the redelivery harmless. The task names stay
`messaging.*` (the beat schedule and queued tasks name them); config/celery.py discovers this module.
"""

import logging

from celery import shared_task
from kombu.exceptions import OperationalError

from messaging.outbound import dispatch

logger = logging.getLogger(__name__)


@shared_task(name="messaging.dispatch")
def dispatch_task(public_id: str | None = None) -> int:
    return dispatch.dispatch_batch(public_id=public_id, on_slow_down=_continue_later)


def dispatch_woken() -> dispatch.BatchCounts:
    """A batch for a woken thread of the dispatch loop (messaging/outbound/loop.py), as dispatch_task would send it."""
    return dispatch.dispatch_batch_counted(on_slow_down=_continue_later)


def _continue_later() -> None:
    """A batch the relay asked to slow down in gave its rest back: a task to pick it up at the lowered rate."""
    try:
        dispatch_task.apply_async(countdown=dispatch.SLOW_DOWN_RETRY_SECONDS, retry=False)
    except (OperationalError, OSError) as exc:
        logger.warning("dispatch: follow-up after a slow-down not queued (the sweeper will pick it up): %s", exc)


@shared_task(name="messaging.dispatch_sweep")
def dispatch_sweep_task() -> int:
    return dispatch.dispatch_sweep(enqueue=lambda: dispatch_task.apply_async(retry=False))


def dispatch_enqueue(*, public_id: str) -> None:
    """Queue the dispatch of a just-committed message; a broker outage is logged, not raised.

    The message is stored with `next_attempt_at` set, so the sweeper sends it once the broker is back.
    """
    try:
        dispatch_task.apply_async(args=(public_id,), retry=False)
    except (OperationalError, OSError) as exc:
        logger.warning("dispatch of %s not queued (the sweeper will pick it up): %s", public_id, exc)

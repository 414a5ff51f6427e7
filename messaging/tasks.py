"""Celery tasks for dispatch: thin wrappers around messaging/outbound/dispatch.py.

acks_late with reject_on_worker_lost (config/settings.py): a worker killed mid-task leaves the
task to be redelivered, and the claim in dispatch makes the redelivery harmless.
"""

import logging

from celery import shared_task
from kombu.exceptions import OperationalError

from mailservice.errors import ValidationFailed
from messaging import aggregates
from messaging.idempotency import idempotency_purge
from messaging.outbound import dispatch
from messaging.readiness import readiness_check_all
from messaging.retention import messages_purge, report_data_purge

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


@shared_task(name="messaging.status_counts_rollup")
def status_counts_rollup_task() -> int:
    return aggregates.status_counts_rollup()


def dispatch_enqueue(*, public_id: str) -> None:
    """Queue the dispatch of a just-committed message; a broker outage is logged, not raised.

    The message is stored with `next_attempt_at` set, so the sweeper sends it once the broker is back.
    """
    try:
        dispatch_task.apply_async(args=(public_id,), retry=False)
    except (OperationalError, OSError) as exc:
        logger.warning("dispatch of %s not queued (the sweeper will pick it up): %s", public_id, exc)


@shared_task(name="messaging.retention_purge")
def retention_purge_task() -> int:
    report_data_purge()
    return messages_purge().total


@shared_task(name="messaging.idempotency_purge")
def idempotency_purge_task() -> int:
    return idempotency_purge()


@shared_task(name="messaging.tls_reports_send")
def tls_reports_send_task() -> int:
    """Yesterday's (UTC) TLS reports; returns how many submissions were made or skipped."""
    # Imported here: it stores messages through messaging.services, which imports this module.
    from messaging.tls_reporting import previous_utc_day, tls_reports_send

    try:
        results = tls_reports_send(day=previous_utc_day())
    except ValidationFailed as exc:
        logger.warning("tls-rpt: no reports sent: %s", exc.message)
        return 0
    if results is None:
        logger.info("tls-rpt: no reports sent: MAILSERVICE_TLSRPT_FROM is unset")
        return 0
    return len(results)


@shared_task(name="messaging.readiness_check")
def readiness_check_task() -> int:
    return readiness_check_all()

"""messaging's periodic Celery tasks: the status counts' roll-up, retention, idempotency keys, the day's
TLS reports and the readiness check; thin wrappers around the services that do the work. Dispatch's own
tasks are outbound's (messaging/outbound/tasks.py).
"""

import logging

from celery import shared_task

from mailservice.errors import ValidationFailed
from messaging import aggregates
from messaging.idempotency import idempotency_purge
from messaging.readiness.check import readiness_check_all
from messaging.retention import messages_purge, report_data_purge
from messaging.tls_reports.sending import previous_utc_day, tls_reports_send

logger = logging.getLogger(__name__)


@shared_task(name="messaging.status_counts_rollup")
def status_counts_rollup_task() -> int:
    return aggregates.status_counts_rollup()


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

"""The retention policy: messages are kept MAILSERVICE_RETENTION_DAYS days (or their domain's own
`retention_days`), then purged with their events and raw sources (received mail, submissions).

The purge works domain by domain in small batches, each its own short transaction: the expired
messages of a domain are found through `message_list_idx` (domain, created_at), the index the
API's list already uses, so no batch scans the table and the API's own queries never wait long.
Before a batch is deleted, its messages are added to `DailyMessageCount` in the same
transaction, so the console's figures survive. Messages still `accepted` (waiting for dispatch,
e.g. behind a pause) are never purged; suppressions are kept (only their link to the message goes).
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from domains.models import Domain
from messaging.models import (
    DailyMessageCount,
    Message,
    MessageEvent,
    ReportMail,
    Status,
    Suppression,
    TlsReportSubmission,
    TlsSessionCount,
)

logger = logging.getLogger(__name__)

# Between two batches the purge rests as long as the last one took, so it works at most half the
# time and leaves the rest of the CPU and the database to the API: unthrottled on the shared 2-core
# bench machine, it tripled the API's p99 while it ran (bench/results/retention-purge.md).
REST_PER_WORK = 1.0


@dataclass
class PurgeResult:
    purged: dict[str, int] = field(default_factory=dict)  # domain name: messages purged (or due, in a dry run)

    @property
    def total(self) -> int:
        return sum(self.purged.values())


def retention_cutoff(*, domain: Domain, now: datetime) -> datetime:
    """Messages of `domain` created before this are past retention."""
    return now - timedelta(days=domain.retention_days or settings.MAILSERVICE_RETENTION_DAYS)


def expired_messages(*, domain: Domain, now: datetime) -> QuerySet[Message]:
    # message_list_idx (domain_id, created_at DESC, public_id DESC) serves it: domain equality and a
    # created_at range, oldest first by scanning the index backwards.
    cutoff = retention_cutoff(domain=domain, now=now)
    return Message.objects.filter(domain=domain, created_at__lt=cutoff).exclude(status=Status.ACCEPTED)


def _count_before_delete(ids: list[int], now: datetime) -> None:
    """Add the messages `ids` to DailyMessageCount (one upsert), in the transaction that deletes them.

    Sandbox mail is left out: the counts stand for live messages in the domain's rates."""
    rows = list(
        Message.objects.filter(pk__in=ids, is_test=False)
        .annotate(day=TruncDate("created_at"))
        .values_list("domain_id", "day", "direction", "status")
        .annotate(n=Count("id"))
        .order_by()
    )
    if not rows:
        return
    table = connection.ops.quote_name(DailyMessageCount._meta.db_table)
    # PostgreSQL and SQLite share this upsert syntax; only the model's identifiers are interpolated.
    sql = (
        f'INSERT INTO {table} ("domain_id", "day", "direction", "status", "count", "created_at", "updated_at") '  # noqa: S608
        f"VALUES {', '.join(['(%s, %s, %s, %s, %s, %s, %s)'] * len(rows))} "
        'ON CONFLICT ("domain_id", "day", "direction", "status") '
        f'DO UPDATE SET "count" = {table}."count" + excluded."count", "updated_at" = excluded."updated_at"'
    )
    params = [value for row in rows for value in (*row, now, now)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)


def _purge_batch(expired: QuerySet[Message], *, batch_size: int, now: datetime) -> int:
    """Delete the oldest `batch_size` expired messages and everything hanging off them, in one short transaction."""
    with transaction.atomic():
        # SKIP LOCKED: a message some other transaction holds (a late bounce report) waits for the next run.
        ids = list(
            expired.order_by("created_at").select_for_update(skip_locked=True).values_list("pk", flat=True)[:batch_size]
        )
        if not ids:
            return 0
        _count_before_delete(ids, now)
        MessageEvent.objects.filter(message_id__in=ids).delete()
        Suppression.objects.filter(source_message_id__in=ids).update(source_message=None)
        # Nothing refers to these rows any more: one DELETE, without Django's collector reading them first.
        Message.objects.filter(pk__in=ids)._raw_delete(connection.alias)
    return len(ids)


def messages_purge(*, dry_run: bool = False, now: datetime | None = None, batch_size: int | None = None) -> PurgeResult:
    """Purge every domain's messages past retention; with `dry_run`, only count them."""
    now = now or timezone.now()
    batch_size = batch_size or settings.MAILSERVICE_RETENTION_BATCH_SIZE
    result = PurgeResult()
    for domain in Domain.objects.only("pk", "name", "retention_days").order_by("pk"):
        expired = expired_messages(domain=domain, now=now)
        if dry_run:
            count = expired.count()
        else:
            count = 0
            while True:
                started = time.monotonic()
                purged = _purge_batch(expired, batch_size=batch_size, now=now)
                if not purged:
                    break
                count += purged
                time.sleep((time.monotonic() - started) * REST_PER_WORK)
        if count:
            result.purged[domain.name] = count
    if not dry_run and result.total:
        logger.info("retention: purged %d message(s): %s", result.total, result.purged)
    return result


def report_data_purge(*, now: datetime | None = None) -> dict[str, int]:
    """Delete, past MAILSERVICE_RETENTION_DAYS, the mail received at the report addresses (kept whole,
    with why it was or was not stored as a report) and direct delivery's TLS-RPT counts and sent-report
    records; the parsed DMARC and TLS reports stay (small rows, the domain page's history)."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.MAILSERVICE_RETENTION_DAYS)
    deleted = {
        "report mail": ReportMail.objects.filter(created_at__lt=cutoff).delete()[0],
        "TLS session counts": TlsSessionCount.objects.filter(day__lt=cutoff.date()).delete()[0],
        "TLS report submissions": TlsReportSubmission.objects.filter(day__lt=cutoff.date()).delete()[0],
    }
    if any(deleted.values()):
        logger.info("retention: purged %s", ", ".join(f"{count} {what}" for what, count in deleted.items() if count))
    return deleted

"""The retention policy: messages are kept MAILSERVICE_RETENTION_DAYS days (or their domain's own
`retention_days`), then purged with their events and raw sources (received mail, submissions).

The purge works domain by domain in small batches, each its own short transaction: the expired
messages of a domain are found through `message_list_idx` (domain, created_at), the index the
API's list already uses, so no batch scans the table and the API's own queries never wait long.
Before a batch is deleted, its messages are added to `DailyMessageCount` in the same
transaction, so the console's figures survive. Messages still `accepted` (waiting for dispatch,
e.g. behind a pause) are never purged; suppressions are kept (only their link to the message goes).

On PostgreSQL, where messages and events are partitioned by day (mailservice/partitions.py), a
day wholly past the longest retention any domain has is dropped as a whole partition instead: its
messages are counted into `DailyMessageCount` by one aggregate, suppressions let go of them, and
the partition goes in one statement, leaving no dead tuples. A day that still holds an `accepted`
message is kept (a warning, and the `mailservice_retention_held_partitions` gauge) and its other
rows go by the row purge, until dispatch is done with it. Domains with a shorter retention, and
rows of the DEFAULT partition, keep the row purge. Events' days are dropped once no older day of
messages is left. Messages of those domains go at the end of the UTC day they pass retention,
with their day's partition, rather than within the hour.
"""

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max, QuerySet
from django.db.models.functions import TruncDate
from django.utils import timezone

from domains.models import Domain
from mailservice import partitions
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
from messaging.partitioning import history_partition_dropping, history_partitioned, history_partitions_ensure

logger = logging.getLogger(__name__)

# Between two batches the purge rests as long as the last one took, so it works at most half the
# time and leaves the rest of the CPU and the database to the API: unthrottled on the shared 2-core
# bench machine, it tripled the API's p99 while it ran (bench/results/retention-purge.md).
REST_PER_WORK = 1.0


@dataclass
class PurgeResult:
    purged: dict[str, int] = field(default_factory=dict)  # domain name: messages purged (or due, in a dry run)
    dropped: list[str] = field(default_factory=list)  # the partitions dropped (or due, in a dry run)
    held: list[str] = field(default_factory=list)  # message partitions past retention kept for accepted messages

    @property
    def total(self) -> int:
        return sum(self.purged.values())


def longest_retention_days() -> int:
    """The longest retention any domain has: a day older than that is past every domain's."""
    longest = Domain.objects.aggregate(longest=Max("retention_days"))["longest"] or 0
    return max(longest, settings.MAILSERVICE_RETENTION_DAYS)


def _partition_cutoff(now: datetime, longest_days: int) -> datetime:
    """Day partitions that end at or before this are past every domain's retention (the start of a UTC day)."""
    day = (now - timedelta(days=longest_days)).astimezone(UTC).date()
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


def retention_cutoff(*, domain: Domain, now: datetime, longest_days: int | None = None) -> datetime:
    """Messages of `domain` created before this are past retention (and go by the row purge).

    On partitioned history, a domain kept the longest retention (`longest_days`) waits for its day's
    partition to be dropped whole, so the row purge never deletes from a day that is about to go."""
    days = domain.retention_days or settings.MAILSERVICE_RETENTION_DAYS
    if longest_days is not None and days >= longest_days and history_partitioned():
        return _partition_cutoff(now, longest_days)
    return now - timedelta(days=days)


def expired_messages(*, domain: Domain, now: datetime, longest_days: int | None = None) -> QuerySet[Message]:
    # message_list_idx (domain_id, created_at DESC, public_id DESC) serves it: domain equality and a
    # created_at range, oldest first by scanning the index backwards.
    cutoff = retention_cutoff(domain=domain, now=now, longest_days=longest_days)
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


def _count_partition_before_drop(partition: str, now: datetime) -> dict[int, int]:
    """Add a day partition's live messages to DailyMessageCount, before it is dropped; returns its
    messages (sandbox mail too) per domain id. One pass over the partition does both."""
    table = connection.ops.quote_name(DailyMessageCount._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH counted AS ("  # noqa: S608
            "SELECT domain_id, (created_at AT TIME ZONE %s)::date AS day, direction, status, is_test, count(*) AS n "
            f"FROM {connection.ops.quote_name(partition)} GROUP BY 1, 2, 3, 4, 5), "
            f'added AS (INSERT INTO {table} ("domain_id", "day", "direction", "status", "count", "created_at", '
            '"updated_at") SELECT domain_id, day, direction, status, sum(n), %s, %s FROM counted WHERE NOT is_test '
            'GROUP BY 1, 2, 3, 4 ON CONFLICT ("domain_id", "day", "direction", "status") '
            f'DO UPDATE SET "count" = {table}."count" + excluded."count", "updated_at" = excluded."updated_at") '
            "SELECT domain_id, sum(n) FROM counted GROUP BY 1",
            [timezone.get_current_timezone_name(), now, now],
        )
        return {domain_id: int(count) for domain_id, count in cursor.fetchall()}


def _suppressions_let_go(partition: str) -> None:
    """Suppressions outlive the message that caused them (Suppression.source_message has no key in the database)."""
    table = connection.ops.quote_name(Suppression._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET source_message_id = NULL "  # noqa: S608
            f"WHERE source_message_id IN (SELECT id FROM {connection.ops.quote_name(partition)})"
        )


def _holds_accepted(partition: str) -> bool:
    with connection.cursor() as cursor:
        # message_pending_idx (accepted messages) of the partition serves it.
        cursor.execute(
            f"SELECT EXISTS (SELECT 1 FROM {connection.ops.quote_name(partition)} WHERE status = %s)",  # noqa: S608
            [Status.ACCEPTED],
        )
        return bool(cursor.fetchone()[0])


def held_partitions(*, now: datetime | None = None) -> list[str]:
    """The message day partitions past every domain's retention that are still there: each holds a
    message still `accepted` (otherwise the next purge drops it)."""
    if not partitions.available():
        return []
    days = partitions.day_partitions(Message._meta.db_table)  # none when the table is not partitioned
    if not days:
        return []
    cutoff = _partition_cutoff(now or timezone.now(), longest_retention_days()).date()
    return [p.name for p in days if p.end <= cutoff]


def _partitions_drop(*, now: datetime, longest_days: int, dry_run: bool, result: PurgeResult) -> None:
    """Drop the message day partitions past every domain's retention, then the event days older than
    every message day left."""
    cutoff = _partition_cutoff(now, longest_days).date()
    messages_table, events_table = Message._meta.db_table, MessageEvent._meta.db_table
    dropped: dict[int, int] = {}  # domain id: messages dropped with their day
    for partition in partitions.day_partitions(messages_table):
        if partition.end > cutoff:
            break
        if _holds_accepted(partition.name):
            result.held.append(partition.name)
            continue
        result.dropped.append(partition.name)
        if dry_run:
            continue
        with transaction.atomic():
            for domain_id, count in _count_partition_before_drop(partition.name, now).items():
                dropped[domain_id] = dropped.get(domain_id, 0) + count
            _suppressions_let_go(partition.name)
            partitions.partition_drop(partition.name)
    # An event is never older than its message: an event day before every message day left is one of
    # dropped messages (or of the DEFAULT partition's, which are older still).
    left = [p.day for p in partitions.day_partitions(messages_table) if p.name not in result.dropped]
    events_before = min([cutoff, *left])
    for partition in partitions.day_partitions(events_table):
        if partition.end > events_before:
            break
        result.dropped.append(partition.name)
        if not dry_run:
            with transaction.atomic():
                history_partition_dropping.send(sender=MessageEvent, partition=partition.name, day=partition.day)
                partitions.partition_drop(partition.name)
    names = dict(Domain.objects.filter(pk__in=dropped).values_list("pk", "name"))
    for domain_id, count in dropped.items():
        name = names.get(domain_id, str(domain_id))
        result.purged[name] = result.purged.get(name, 0) + count
    if result.held:
        logger.warning(
            "retention: %d partition(s) past retention kept: they hold messages still accepted: %s",
            len(result.held),
            ", ".join(result.held),
        )


def messages_purge(*, dry_run: bool = False, now: datetime | None = None, batch_size: int | None = None) -> PurgeResult:
    """Purge every domain's messages past retention; with `dry_run`, only count them."""
    now = now or timezone.now()
    batch_size = batch_size or settings.MAILSERVICE_RETENTION_BATCH_SIZE
    result = PurgeResult()
    longest_days = longest_retention_days()
    if history_partitioned():
        if not dry_run:
            history_partitions_ensure(today=now.astimezone(UTC).date())
        _partitions_drop(now=now, longest_days=longest_days, dry_run=dry_run, result=result)
    for domain in Domain.objects.only("pk", "name", "retention_days").order_by("pk"):
        expired = expired_messages(domain=domain, now=now, longest_days=longest_days)
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
            result.purged[domain.name] = result.purged.get(domain.name, 0) + count
    if not dry_run and result.total:
        logger.info("retention: purged %d message(s): %s", result.total, result.purged)
    if not dry_run and result.dropped:
        logger.info("retention: dropped %d partition(s): %s", len(result.dropped), ", ".join(result.dropped))
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

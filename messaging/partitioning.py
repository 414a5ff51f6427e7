"""Which tables are partitioned by day on PostgreSQL (the history, and the tables of the apps above
that follow its days: webhook deliveries), and their upkeep: the day partitions are made
DAYS_AHEAD days ahead by the retention task (messaging.retention.messages_purge, which also drops
expired ones) and by `manage.py partitions`. The mechanics are the kernel's (mailservice/partitions.py)."""

import logging
from collections.abc import Callable
from datetime import date, timedelta

from django.db import connection
from django.dispatch import Signal

from mailservice import partitions
from messaging.models import Message, MessageEvent

logger = logging.getLogger(__name__)

HISTORY_TABLES = (Message._meta.db_table, MessageEvent._meta.db_table)
# Tables of the apps above (table: partition key) partitioned by the day of the history row each of
# their rows is about, registered when their app is ready: their days are made with the history's,
# partition_history takes them after it, and they drop a day with the events' (the signal below).
_FOLLOWER_TABLES: dict[str, str] = {}
# Sent in the transaction that drops a day partition of events (keywords `partition`: its table name,
# `day`: its date), before the drop, so that what refers to those events without a database key
# (webhook deliveries) goes too.
history_partition_dropping = Signal()
# Rows of a day with no partition go to the DEFAULT one and keep the row purge; a week ahead
# leaves room for the daily task to miss a few runs.
DAYS_AHEAD = 7
# `migrate` partitions a table this small itself, within its transaction, which holds its locks until it
# commits: a few seconds at most. A bigger one is left to `manage.py partition_history`, online.
MIGRATE_AT_MOST_ROWS = 10_000


def history_follower_register(table: str, *, key: str) -> None:
    """Partition `table` by day on its column `key`, which holds the created_at of the event its row is about."""
    _FOLLOWER_TABLES[table] = key


def history_tables() -> dict[str, str]:
    """Every table partitioned with the history (table: partition key), in the order partition_history takes them."""
    return {**dict.fromkeys(HISTORY_TABLES, partitions.DEFAULT_PARTITION_KEY), **_FOLLOWER_TABLES}


def history_partitioned() -> bool:
    """Whether this database's messages are partitioned (PostgreSQL, after the migration or partition_history)."""
    return partitions.is_partitioned(Message._meta.db_table)


def history_partitions_ensure(*, today: date | None = None) -> list[str]:
    """Make the day partitions of today and DAYS_AHEAD days ahead of every partitioned history table."""
    today = today or partitions.utc_today()
    days = [today + timedelta(days=offset) for offset in range(DAYS_AHEAD + 1)]
    created: list[str] = []
    for table in history_tables():
        if partitions.is_partitioned(table):
            created += partitions.partitions_ensure(table, days=days)
    return created


def history_partition(
    table: str, *, batch_size: int = 5000, rest_per_work: float = 0.0, progress: Callable[[int], None] | None = None
) -> int:
    """Partition one history table online (mailservice.partitions.partition_table); returns the rows copied."""
    return partitions.partition_table(
        table,
        key=history_tables()[table],
        days_ahead=DAYS_AHEAD,
        batch_size=batch_size,
        rest_per_work=rest_per_work,
        progress=progress or (lambda copied: None),
    )


def history_partition_when_small(table: str) -> None:
    """`migrate`'s step on PostgreSQL: partition `table` now if it holds at most MIGRATE_AT_MOST_ROWS rows, else
    leave it plain and say that `manage.py partition_history` must partition it online (docs/operating.md)."""
    with connection.cursor() as cursor:
        quoted = connection.ops.quote_name(table)
        cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {quoted} LIMIT %s) t", [MIGRATE_AT_MOST_ROWS + 1])  # noqa: S608
        (rows,) = cursor.fetchone()
    if rows > MIGRATE_AT_MOST_ROWS:
        logger.warning("%s has many rows: run `manage.py partition_history` to partition it online", table)
    else:
        history_partition(table)

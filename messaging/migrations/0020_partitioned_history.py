"""Messages and their events partitioned by day on PostgreSQL (mailservice/partitions.py).

A small table (a fresh installation, the test database: at most SMALL rows) is partitioned here at
once. A bigger one is left alone, with a warning: partitioning it copies every row, which `manage.py
partition_history` does online, in short batches, while the service runs (docs/operating.md).
SQLite keeps plain tables. Reversed, the tables become plain again (for development databases)."""

import logging

from django.db import migrations

from mailservice.partitions import unpartition_table
from messaging.partitioning import HISTORY_TABLES, history_partition

logger = logging.getLogger("messaging.partitioning")
# Copied within the migration's transaction, which holds its locks until it commits: a few seconds at most.
SMALL = 10_000


def _partition_when_small(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in HISTORY_TABLES:
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {schema_editor.quote_name(table)} LIMIT %s) t", [SMALL + 1])  # noqa: S608
            (rows,) = cursor.fetchone()
        if rows > SMALL:
            logger.warning("%s has many rows: run `manage.py partition_history` to partition it online", table)
        else:
            history_partition(table)


def _plain_again(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in reversed(HISTORY_TABLES):
            unpartition_table(table)


class Migration(migrations.Migration):

    dependencies = [
        ('messaging', '0019_partitioned_history_keys'),
        ('webhooks', '0003_message_event_without_db_key'),
    ]

    operations = [migrations.RunPython(_partition_when_small, _plain_again, elidable=False)]

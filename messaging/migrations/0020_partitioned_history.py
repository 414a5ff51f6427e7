"""Messages and their events partitioned by day on PostgreSQL (mailservice/partitions.py).

A small table (a fresh installation, the test database: at most MIGRATE_AT_MOST_ROWS rows, in
messaging/partitioning.py) is partitioned here at once. A bigger one is left alone, with a warning: partitioning it copies every row, which `manage.py
partition_history` does online, in short batches, while the service runs (docs/operating.md).
SQLite keeps plain tables. Reversed, the tables become plain again (for development databases)."""

from django.db import migrations

from mailservice.partitions import unpartition_table
from messaging.partitioning import HISTORY_TABLES, history_partition_when_small


def _partition_when_small(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        for table in HISTORY_TABLES:
            history_partition_when_small(table)


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

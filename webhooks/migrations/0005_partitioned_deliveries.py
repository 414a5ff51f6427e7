"""Webhook deliveries partitioned by day of their event (subject_created_at) on PostgreSQL, like
messages and events in messaging 0020: a small table at once, a bigger one by `manage.py
partition_history`, online (docs/operating.md). SQLite keeps a plain table."""

import logging

from django.db import migrations

from mailservice.partitions import unpartition_table
from messaging.partitioning import history_partition

logger = logging.getLogger("messaging.partitioning")
TABLE = "webhooks_webhookdelivery"
# Copied within the migration's transaction, which holds its locks until it commits: a few seconds at most.
SMALL = 10_000


def _partition_when_small(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM (SELECT 1 FROM {TABLE} LIMIT %s) t", [SMALL + 1])  # noqa: S608
        (rows,) = cursor.fetchone()
    if rows > SMALL:
        logger.warning("%s has many rows: run `manage.py partition_history` to partition it online", TABLE)
    else:
        history_partition(TABLE)


def _plain_again(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        unpartition_table(TABLE)


class Migration(migrations.Migration):

    dependencies = [
        ('webhooks', '0004_delivery_subject_created_at'),
    ]

    operations = [migrations.RunPython(_partition_when_small, _plain_again, elidable=False)]

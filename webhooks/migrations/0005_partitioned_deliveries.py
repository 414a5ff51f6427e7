"""Webhook deliveries partitioned by day of their event (subject_created_at) on PostgreSQL, like
messages and events in messaging 0020: a small table at once, a bigger one by `manage.py
partition_history`, online (docs/operating.md). SQLite keeps a plain table."""

from django.db import migrations

from mailservice.partitions import unpartition_table
from messaging.partitioning import history_partition_when_small

TABLE = "webhooks_webhookdelivery"


def _partition_when_small(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        history_partition_when_small(TABLE)


def _plain_again(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        unpartition_table(TABLE)


class Migration(migrations.Migration):

    dependencies = [
        ('webhooks', '0004_delivery_subject_created_at'),
    ]

    operations = [migrations.RunPython(_partition_when_small, _plain_again, elidable=False)]

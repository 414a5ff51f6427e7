"""The deliveries' partition key (mailservice/partitions.py): `subject_created_at`, the created_at of
the event or DMARC report a delivery is about. The rows there are get it in short batches, each its
own transaction, then the column becomes NOT NULL without a scan under lock on PostgreSQL (a
validated CHECK first). The exactly-once constraints hold it: on PostgreSQL they are remade by the
partitioning (0005 or manage.py partition_history), so a big plain table is not locked here while a
unique index is built; SQLite, which keeps plain tables, gets them now."""

from django.db import migrations, models

BATCH = 5000
CHECK = "webhook_delivery_subject_created_at_not_null"
FIELD = models.DateTimeField(help_text="When the event (or the DMARC report) this delivery is about was created")
OLD = (
    models.UniqueConstraint(fields=("endpoint", "message_event"), name="webhook_delivery_once_per_endpoint"),
    models.UniqueConstraint(fields=("endpoint", "dmarc_report"), name="webhook_delivery_report_once"),
)
NEW = (
    models.UniqueConstraint(
        fields=("endpoint", "message_event", "subject_created_at"), name="webhook_delivery_once_per_endpoint"
    ),
    models.UniqueConstraint(fields=("endpoint", "dmarc_report", "subject_created_at"), name="webhook_delivery_report_once"),
)


def _fill(schema_editor, where: str, params: list) -> None:
    q = schema_editor.quote_name
    # A delivery whose event or report is gone keeps a day anyway: its own created_at.
    sql = (
        f"UPDATE {q('webhooks_webhookdelivery')} SET {q('subject_created_at')} = coalesce("  # noqa: S608
        f"(SELECT created_at FROM {q('messaging_messageevent')} e WHERE e.id = message_event_id), "
        f"(SELECT created_at FROM {q('messaging_dmarcreport')} r WHERE r.id = dmarc_report_id), "
        f"{q('webhooks_webhookdelivery')}.created_at) WHERE subject_created_at IS NULL {where}"
    )
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(sql, params)


def _backfill(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT coalesce(max(id), 0) FROM webhooks_webhookdelivery")
        (last_id,) = cursor.fetchone()
    for start in range(0, last_id, BATCH):
        _fill(schema_editor, "AND id > %s AND id <= %s", [start, start + BATCH])


def _not_null(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        _fill(schema_editor, "", [])  # the rows written while the batches ran; the AlterField below does the rest
        return
    q = schema_editor.quote_name
    with schema_editor.connection.cursor() as cursor:
        # The CHECK, NOT VALID, refuses a new row without the column at once (an old worker's fan-out
        # fails and its events wait for the new version); the sweep fills those written meanwhile;
        # VALIDATE scans without blocking writes, and SET NOT NULL then trusts the CHECK.
        cursor.execute(
            f"ALTER TABLE webhooks_webhookdelivery ADD CONSTRAINT {q(CHECK)} "
            "CHECK (subject_created_at IS NOT NULL) NOT VALID"
        )
        _fill(schema_editor, "", [])
        cursor.execute(f"ALTER TABLE webhooks_webhookdelivery VALIDATE CONSTRAINT {q(CHECK)}")
        cursor.execute("ALTER TABLE webhooks_webhookdelivery ALTER subject_created_at SET NOT NULL")
        cursor.execute(f"ALTER TABLE webhooks_webhookdelivery DROP CONSTRAINT {q(CHECK)}")


def _nullable(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("ALTER TABLE webhooks_webhookdelivery ALTER subject_created_at DROP NOT NULL")


class _NotOnPostgreSQL:
    """A step that changes the model everywhere and the database only outside PostgreSQL, where it is
    done otherwise (above, or by the partitioning)."""

    def database_forwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(self, app_label, schema_editor, from_state, to_state):
        if schema_editor.connection.vendor != "postgresql":
            super().database_backwards(app_label, schema_editor, from_state, to_state)


class AlterFieldNotOnPostgreSQL(_NotOnPostgreSQL, migrations.AlterField):
    pass


class RemoveConstraintNotOnPostgreSQL(_NotOnPostgreSQL, migrations.RemoveConstraint):
    pass


class AddConstraintNotOnPostgreSQL(_NotOnPostgreSQL, migrations.AddConstraint):
    pass


class Migration(migrations.Migration):
    # Each backfill batch commits on its own: the table's rows are never all locked at once.
    atomic = False

    dependencies = [
        ('messaging', '0020_partitioned_history'),
        ('webhooks', '0003_message_event_without_db_key'),
    ]

    operations = [
        migrations.AddField(
            model_name='webhookdelivery',
            name='subject_created_at',
            field=models.DateTimeField(null=True, help_text=FIELD.help_text),
        ),
        migrations.RunPython(_backfill, migrations.RunPython.noop, elidable=False),
        migrations.RunPython(_not_null, _nullable, elidable=False),
        AlterFieldNotOnPostgreSQL(model_name='webhookdelivery', name='subject_created_at', field=FIELD),
        *(RemoveConstraintNotOnPostgreSQL(model_name='webhookdelivery', name=c.name) for c in OLD),
        *(AddConstraintNotOnPostgreSQL(model_name='webhookdelivery', constraint=c) for c in NEW),
    ]

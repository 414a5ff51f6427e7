"""Keys for partitioned history (mailservice/partitions.py): no foreign key into messages, and the
public id's unique constraint holds created_at. On PostgreSQL that constraint is made by the
partitioning (0020 or manage.py partition_history), so a big plain table is not locked here while a
new unique index is built; SQLite, which keeps plain tables, gets it now."""

import django.db.models.deletion
from django.db import migrations, models

OLD = models.UniqueConstraint(fields=("public_id",), name="message_public_id_unique")
NEW = models.UniqueConstraint(fields=("public_id", "created_at"), name="message_public_id_unique")


def _constraint_on_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        return
    message = apps.get_model("messaging", "Message")
    schema_editor.remove_constraint(message, OLD)
    schema_editor.add_constraint(message, NEW)


def _constraint_back_on_sqlite(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        return
    message = apps.get_model("messaging", "Message")
    schema_editor.remove_constraint(message, NEW)
    schema_editor.add_constraint(message, OLD)


class Migration(migrations.Migration):

    dependencies = [
        ('domains', '0008_source_pools'),
        ('messaging', '0018_report_mail_retention_index'),
        ('templates_app', '0002_slug_pattern_anchored'),
    ]

    operations = [
        migrations.AlterField(
            model_name='messageevent',
            name='message',
            field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='messaging.message'),
        ),
        migrations.AlterField(
            model_name='suppression',
            name='source_message',
            field=models.ForeignKey(blank=True, db_constraint=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='messaging.message'),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name='message', name='message_public_id_unique'),
                migrations.AddConstraint(model_name='message', constraint=NEW),
            ],
            database_operations=[migrations.RunPython(_constraint_on_sqlite, _constraint_back_on_sqlite)],
        ),
    ]

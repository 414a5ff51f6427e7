"""Three of the message table's nine indexes go: every send, received message and dispatch outcome
wrote each of them (an outcome changes the status, so its UPDATE writes every index again).

- the domain's own index: message_list_idx starts with the domain and serves the same lookups;
- public_id's second index for LIKE (what unique=True adds on PostgreSQL): no query uses it; the
  uniqueness stays, as the same index under a constraint name;
- the template's index: replaced by one on the few messages that have a template, for its deletion.

The database side is written by hand so that a large table is never rewritten or locked for long
on PostgreSQL: indexes are dropped and built CONCURRENTLY, the foreign keys are left as they are
(Django's generated SQL would drop and re-validate them), and the unique index is renamed, not rebuilt.
"""

import django.db.models.deletion
from django.db import migrations, models

import messaging.models
from messaging.migration_sql import run_by_vendor


TABLE = "messaging_message"
DOMAIN_INDEX = "messaging_message_domain_id_b4544d81"
PUBLIC_ID_LIKE_INDEX = "messaging_message_public_id_82b7a873_like"
TEMPLATE_INDEX = "messaging_message_template_id_922791e8"
TEMPLATE_PARTIAL_INDEX = "message_template_idx"

POSTGRESQL_FORWARDS = [
    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{TEMPLATE_PARTIAL_INDEX}" ON "{TABLE}" ("template_id") '
    'WHERE "template_id" IS NOT NULL',
    f'DROP INDEX CONCURRENTLY IF EXISTS "{TEMPLATE_INDEX}"',
    f'DROP INDEX CONCURRENTLY IF EXISTS "{DOMAIN_INDEX}"',
    f'DROP INDEX CONCURRENTLY IF EXISTS "{PUBLIC_ID_LIKE_INDEX}"',
    f'ALTER TABLE "{TABLE}" RENAME CONSTRAINT "messaging_message_public_id_key" TO "message_public_id_unique"',
]
POSTGRESQL_BACKWARDS = [
    f'ALTER TABLE "{TABLE}" RENAME CONSTRAINT "message_public_id_unique" TO "messaging_message_public_id_key"',
    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{PUBLIC_ID_LIKE_INDEX}" ON "{TABLE}" ("public_id" varchar_pattern_ops)',
    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{DOMAIN_INDEX}" ON "{TABLE}" ("domain_id")',
    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{TEMPLATE_INDEX}" ON "{TABLE}" ("template_id")',
    f'DROP INDEX CONCURRENTLY IF EXISTS "{TEMPLATE_PARTIAL_INDEX}"',
]
# SQLite (the embedded mode) keeps public_id's UNIQUE in its table definition: only the indexes change.
SQLITE_FORWARDS = [
    f'CREATE INDEX IF NOT EXISTS "{TEMPLATE_PARTIAL_INDEX}" ON "{TABLE}" ("template_id") WHERE "template_id" IS NOT NULL',
    f'DROP INDEX IF EXISTS "{TEMPLATE_INDEX}"',
    f'DROP INDEX IF EXISTS "{DOMAIN_INDEX}"',
]
SQLITE_BACKWARDS = [
    f'CREATE INDEX IF NOT EXISTS "{DOMAIN_INDEX}" ON "{TABLE}" ("domain_id")',
    f'CREATE INDEX IF NOT EXISTS "{TEMPLATE_INDEX}" ON "{TABLE}" ("template_id")',
    f'DROP INDEX IF EXISTS "{TEMPLATE_PARTIAL_INDEX}"',
]


class Migration(migrations.Migration):
    atomic = False  # CREATE and DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("domains", "0006_i16_dispatch_weight"),
        ("messaging", "0009_i16_pending_by_domain"),
        ("templates_app", "0002_slug_pattern_anchored"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(
                    run_by_vendor(POSTGRESQL_FORWARDS, SQLITE_FORWARDS), run_by_vendor(POSTGRESQL_BACKWARDS, SQLITE_BACKWARDS)
                )
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="domain",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="domains.domain",
                    ),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="public_id",
                    field=models.CharField(default=messaging.models._message_public_id, editable=False, max_length=40),
                ),
                migrations.AlterField(
                    model_name="message",
                    name="template",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="templates_app.template",
                    ),
                ),
                migrations.AddIndex(
                    model_name="message",
                    index=models.Index(
                        condition=models.Q(("template__isnull", False)), fields=["template"], name=TEMPLATE_PARTIAL_INDEX
                    ),
                ),
                migrations.AddConstraint(
                    model_name="message",
                    constraint=models.UniqueConstraint(fields=("public_id",), name="message_public_id_unique"),
                ),
            ],
        ),
    ]

"""An index for finding a message submitted over SMTP by its own Message-ID in any case, as a report
that names no VERP id is matched (messaging/inbound/services.py: _reported_message). Without it
each such report scanned the whole message table: 0.86 s at a million messages, holding one of the
inbound server's worker slots meanwhile. API mail is found by the public id in its Message-ID, so
it has no entry: sends and their outcomes write nothing more (with an entry for every sent message,
an outcome's UPDATE cost PostgreSQL 14,200 instead of 17,300 to 24,100 a second in pgbench).

On PostgreSQL it is built CONCURRENTLY, so a large table keeps taking sends and outcomes meanwhile.
PostgreSQL does not estimate from a partial index how rare a value is, so on its own the index went
unused: the lookup takes the oldest match, and the planner, guessing 5,000 matches in a million,
walked the primary key and filtered every row. Statistics on the expression (kept by ANALYZE and
autovacuum from then on) tell it a Message-ID is nearly unique: 0.06 ms instead of 0.86 s.
"""

from django.db import migrations, models
from django.db.models.functions import Upper

from messaging.migration_sql import run_by_vendor

TABLE = "messaging_message"
INDEX = "message_id_header_idx"
STATISTICS = "message_id_header_stats"
DEFINITION = f'"{TABLE}" ((UPPER("message_id_header"))) WHERE ("direction" = \'sent\' AND "envelope_recipients" IS NOT NULL)'

POSTGRESQL_FORWARDS = [
    f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{INDEX}" ON {DEFINITION}',
    f'CREATE STATISTICS IF NOT EXISTS "{STATISTICS}" ON (UPPER("message_id_header")) FROM "{TABLE}"',
    f'ANALYZE "{TABLE}"',  # samples the table (30,000 rows by default), whatever its size
]
POSTGRESQL_BACKWARDS = [f'DROP STATISTICS IF EXISTS "{STATISTICS}"', f'DROP INDEX CONCURRENTLY IF EXISTS "{INDEX}"']
SQLITE_FORWARDS = [f'CREATE INDEX IF NOT EXISTS "{INDEX}" ON {DEFINITION}']
SQLITE_BACKWARDS = [f'DROP INDEX IF EXISTS "{INDEX}"']


class Migration(migrations.Migration):
    atomic = False  # CREATE and DROP INDEX CONCURRENTLY cannot run in a transaction

    dependencies = [
        ("messaging", "0010_i19_fewer_message_indexes"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunPython(
                    run_by_vendor(POSTGRESQL_FORWARDS, SQLITE_FORWARDS),
                    run_by_vendor(POSTGRESQL_BACKWARDS, SQLITE_BACKWARDS),
                )
            ],
            state_operations=[
                migrations.AddIndex(
                    model_name="message",
                    index=models.Index(
                        Upper("message_id_header"),
                        condition=models.Q(("direction", "sent"), ("envelope_recipients__isnull", False)),
                        name=INDEX,
                    ),
                ),
            ],
        ),
    ]

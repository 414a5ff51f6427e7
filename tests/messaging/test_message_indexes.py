"""The message table carries only the indexes its queries use: every send, received message and dispatch
outcome writes each one (an outcome changes the status, so its UPDATE writes all of them again)."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from messaging.inbound.routing import NO_VERP
from messaging.inbound.services import _reported_message
from messaging.models import Message, Status
from messaging.sql import insert_columns, insert_fields
from tests.factories import DomainFactory, MessageFactory, TemplateFactory

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's catalogue"),
]


def _indexes() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [Message._meta.db_table])
        return dict(cursor.fetchall())


def test_the_message_table_has_no_index_that_another_one_already_serves():
    indexes = _indexes()

    assert sorted(indexes) == [
        "message_id_header_idx",
        "message_list_dir_idx",
        "message_list_idx",
        "message_pending_domain_idx",
        "message_pending_idx",
        "message_public_id_unique",
        "message_template_idx",
        "messaging_message_pkey",
    ]
    assert "UNIQUE" in indexes["message_public_id_unique"]
    assert "WHERE (template_id IS NOT NULL)" in indexes["message_template_idx"]


def test_deleting_a_domain_or_a_template_still_finds_its_messages_by_an_index():
    domain, template = DomainFactory(), TemplateFactory()
    MessageFactory(domain=domain, template=template)
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # a tiny table: only whether an index can serve counts
        try:
            plans = {}
            for column, value in (("domain_id", domain.pk), ("template_id", template.pk)):
                cursor.execute(f"EXPLAIN SELECT id FROM messaging_message WHERE {column} = %s", [value])  # noqa: S608
                plans[column] = "\n".join(row for (row,) in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")

    assert "message_list" in plans["domain_id"]
    assert "message_template_idx" in plans["template_id"]


def test_a_report_without_a_verp_id_finds_a_submitted_message_by_the_message_id_index_not_by_a_scan():
    # Submitted messages enough for the plan to matter, copied from one in a statement (a factory per row is too slow).
    first = MessageFactory(
        status=Status.DELIVERED, message_id_header="<first@sender.example>", envelope_recipients=["rcpt@example.org"]
    )
    columns = insert_columns(insert_fields(Message, exclude=frozenset({"public_id", "message_id_header"})))
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO messaging_message (public_id, message_id_header, {', '.join(columns)}) "  # noqa: S608
            f"SELECT 'copy-' || n, '<' || n || '@sender.example>', {', '.join(columns)} "
            "FROM messaging_message, generate_series(1, 20000) AS n WHERE id = %s",
            [first.pk],
        )
        cursor.execute("ANALYZE messaging_message")  # what autovacuum does as a table grows

    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        found = _reported_message(verp=NO_VERP, original_message_id="<17@SENDER.example>")
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + queries.captured_queries[0]["sql"])
        plan = "\n".join(row for (row,) in cursor.fetchall())

    assert found is not None and found.public_id == "copy-17"
    assert "message_id_header_idx" in plan, plan

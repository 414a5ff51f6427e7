"""The message table carries only the indexes its queries use: every send, received message and dispatch
outcome writes each one (an outcome changes the status, so its UPDATE writes all of them again)."""

import pytest
from django.db import connection

from messaging.models import Message
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

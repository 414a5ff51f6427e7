"""Events written before the fields existed get them from their `detail`, read once by the migration,
so their webhook payloads are the same as the payload builder made them by parsing the prose."""

import importlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from messaging.models import EventType, MessageEvent
from tests.factories import DomainFactory
from webhooks.payloads import event_fields

pytestmark = pytest.mark.django_db

BEFORE = [("messaging", "0013_i28_status_counts_without_sandbox")]
AFTER = [("messaging", "0014_i29_event_fields")]

# (type, recipient, detail, the old status_code column) -> the payload's fields, as the regexes made them.
OLD_ROWS = [
    (
        (EventType.DELIVERED, "", "250 2.0.0 OK: queued", ""),
        {"smtp_response": "250 2.0.0 OK: queued", "status_code": "2.0.0"},
    ),
    ((EventType.BOUNCED, "", "550 no such user", ""), {"smtp_response": "550 no such user", "bounce_type": "hard"}),
    (
        (EventType.RECIPIENT_REJECTED, "b@example.org", "452 4.2.2 mailbox full", ""),
        {"recipient": "b@example.org", "smtp_response": "452 4.2.2 mailbox full", "status_code": "4.2.2"}
        | {"bounce_type": "soft"},
    ),
    (
        (EventType.BOUNCED, "", "4.2.2 smtp; 452 mailbox full", ""),
        {"status_code": "4.2.2", "diagnostic": "smtp; 452 mailbox full", "bounce_type": "soft"},
    ),
    (
        (EventType.SOFT_BOUNCED, "c@example.org", "smtp; 452 4.2.2 full", "4.2.2"),
        {"recipient": "c@example.org", "status_code": "4.2.2", "diagnostic": "smtp; 452 4.2.2 full"}
        | {"bounce_type": "soft"},
    ),
    (
        (EventType.DELAYED, "c@example.org", "smtp; 451 4.4.1 no answer", "4.4.1"),
        {"recipient": "c@example.org", "status_code": "4.4.1", "diagnostic": "smtp; 451 4.4.1 no answer"},
    ),
    (
        (EventType.RECIPIENT_REJECTED, "d@example.org", "not sent, the relay connection failed: timeout", ""),
        {"recipient": "d@example.org", "diagnostic": "not sent, the relay connection failed: timeout"}
        | {"bounce_type": "hard"},
    ),
    ((EventType.DEFERRED, "", "attempt 1: 451 try later", ""), {"diagnostic": "attempt 1: 451 try later"}),
    (
        (EventType.COMPLAINED, "e@example.org", "feedback-type: Fraud", ""),
        {"recipient": "e@example.org"} | {"feedback_type": "fraud"},
    ),
    (
        (EventType.SUPPRESSED, "f@example.org", "on the list", ""),
        {"recipient": "f@example.org", "diagnostic": "on the list"},
    ),
    ((EventType.ACCEPTED, "", "", ""), {}),
]


def test_the_migration_fills_old_events_fields_from_their_detail_in_batches(monkeypatch):
    monkeypatch.setattr(importlib.import_module("messaging.migrations.0014_i29_event_fields"), "BATCH", 3)
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(BEFORE)
        # The tables as they were then (later migrations add columns the current models write).
        old_apps = executor.loader.project_state(BEFORE).apps
        old_event, old_message = (old_apps.get_model("messaging", name) for name in ("MessageEvent", "Message"))
        message = old_message.objects.create(
            domain_id=DomainFactory().pk, direction="sent", status="delivered", to=[], cc=[], bcc=[]
        )
        for (kind, recipient, detail, status_code), _ in OLD_ROWS:
            old_event.objects.create(
                message_id=message.pk, type=kind, recipient=recipient, detail=detail, status_code=status_code
            )

        with connection.cursor() as cursor:  # the rows' deferred FK checks now: ALTER TABLE refuses pending ones
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        executor.loader.build_graph()
        executor.migrate(AFTER)
        executor.loader.build_graph()  # and the later migrations, which add columns the model reads
        executor.migrate(executor.loader.graph.leaf_nodes())

        events = list(MessageEvent.objects.filter(message_id=message.pk).order_by("id"))
        assert [event_fields(event) for event in events] == [fields for _, fields in OLD_ROWS]
        rejected = events[2]
        assert (rejected.smtp_code, rejected.enhanced_status, rejected.diagnostic, rejected.bounce_type) == (
            452,
            "4.2.2",
            "4.2.2 mailbox full",
            "soft",
        )
        assert events[8].feedback_type == "fraud"
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

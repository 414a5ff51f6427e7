"""Webhook deliveries partitioned by the day of their event (subject_created_at) on PostgreSQL:
the exactly-once constraints stay exact, and the online path from a plain table (partition_history).
Retention's drop of a deliveries day with its events day is in tests/messaging/test_retention.py."""

import random
import threading
import time
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import IntegrityError, connection, connections, transaction
from django.utils import timezone

from mailservice.partitions import is_partitioned, unpartition_table
from messaging.models import EventType, MessageEvent
from tests.factories import DomainFactory, MessageFactory
from webhooks import services
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db
partitioned = pytest.mark.skipif(connection.vendor != "postgresql", reason="deliveries are partitioned on PostgreSQL")
TABLE = WebhookDelivery._meta.db_table


@partitioned
def test_migrate_partitions_deliveries_by_the_day_of_their_event():
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_partkeydef(to_regclass(%s))", [TABLE])
        assert cursor.fetchone()[0] == "RANGE (subject_created_at)"


def test_a_second_fan_out_of_one_event_makes_no_second_delivery(domain):
    endpoints = [
        services.endpoint_create(domain=domain, url=f"http://127.0.0.1:9/{name}", event_types=[]).endpoint
        for name in "ab"
    ]
    event = MessageEvent.objects.create(message=MessageFactory(domain=domain), type=EventType.DELIVERED)
    assert services.events_fan_out() == 1
    # Published again (a fan-out whose transaction committed twice, an operator's replay), a day later.
    MessageEvent.objects.filter(pk=event.pk).update(published_at=None)
    WebhookDelivery.objects.update(created_at=timezone.now() - timedelta(days=1))

    assert services.events_fan_out() == 1

    rows = sorted(WebhookDelivery.objects.values_list("endpoint_id", "message_event_id", "subject_created_at"))
    assert rows == [(endpoint.pk, event.pk, event.created_at) for endpoint in endpoints]


# --- the online path ----------------------------------------------------------------------------

INITIAL_ROWS = 3000


def _rows_written_before(endpoint: WebhookEndpoint) -> list[int]:
    """Deliveries of events of the last three days, as an installation from before partitioning has them."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (endpoint_id, message_event_id, subject_created_at, event_id, event_type, "  # noqa: S608
            "payload, status, attempts, last_error, created_at, updated_at) "
            "SELECT %s, n, now() - make_interval(days => n %% 3, secs => n), 'evt_' || n, 'email.delivered', '{}', "
            "'pending', 0, '', now(), now() FROM generate_series(1, %s) n RETURNING id",
            [endpoint.pk, INITIAL_ROWS],
        )
        return [row[0] for row in cursor.fetchall()]


def _writer(endpoint: WebhookEndpoint, ids: list[int], stop: threading.Event, expected: dict[int, str]) -> None:
    """New deliveries (as fan-out makes them) and recorded outcomes, kept in `expected` (id: status)."""
    rng = random.Random(7)
    try:
        while not stop.is_set():
            if rng.random() < 0.5:
                made = WebhookDelivery.objects.create(
                    endpoint=endpoint,
                    message_event_id=INITIAL_ROWS + len(expected) + 1,
                    subject_created_at=timezone.now(),
                    event_id="evt_new",
                    event_type="email.delivered",
                    payload="{}",
                )
                expected[made.pk] = made.status
            else:
                target = rng.choice(ids)
                WebhookDelivery.objects.filter(pk=target).update(status=DeliveryStatus.SUCCEEDED)
                expected[target] = DeliveryStatus.SUCCEEDED
            time.sleep(0.002)
    finally:
        connections.close_all()


@partitioned
@pytest.mark.django_db(transaction=True)
def test_partition_history_converts_a_plain_deliveries_table_while_deliveries_are_written(capsys):
    unpartition_table(TABLE)
    endpoint = WebhookEndpoint.objects.create(domain=DomainFactory(), url="https://hooks.example.com/")
    ids = _rows_written_before(endpoint)
    expected = dict.fromkeys(ids, "pending")
    stop = threading.Event()
    writer = threading.Thread(target=_writer, args=(endpoint, ids, stop, expected))
    writer.start()
    try:
        time.sleep(0.1)
        call_command("partition_history", batch_size=300, rest=1.0)
        written_during_copy = len(expected) - INITIAL_ROWS
    finally:
        stop.set()
        writer.join()

    assert is_partitioned(TABLE)
    assert f"{TABLE}: partitioned by day" in capsys.readouterr().out
    assert written_during_copy > 0
    assert dict(WebhookDelivery.objects.values_list("pk", "status")) == expected
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {TABLE}_default")  # noqa: S608
        assert cursor.fetchone()[0] == 0, "every day copied has a partition of its own"
    # Still exactly once: the same event for the same endpoint is refused, whatever day it is written.
    first = WebhookDelivery.objects.get(pk=ids[0])
    with pytest.raises(IntegrityError), transaction.atomic():
        WebhookDelivery.objects.create(
            endpoint=endpoint,
            message_event_id=first.message_event_id,
            subject_created_at=first.subject_created_at,
            event_id="evt_again",
            event_type="email.delivered",
            payload="{}",
        )

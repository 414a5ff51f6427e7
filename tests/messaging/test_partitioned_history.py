"""Partitioned history on PostgreSQL: public ids that name their day, lookups that read one or two
partitions, older ids that still resolve, and the online path from plain tables (partition_history)."""

import random
import re
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from mailservice.ids import public_id, public_id_time, timed_public_id
from mailservice.partitions import is_partitioned, partition_table
from messaging.models import Message, message_by_public_id
from messaging.selectors import message_get
from tests.factories import DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db
partitioned = pytest.mark.skipif(connection.vendor != "postgresql", reason="history is partitioned on PostgreSQL")


def test_a_timed_id_carries_its_time_before_103_random_bits():
    made = datetime(2026, 11, 27, 8, 30, 15, 123000, tzinfo=UTC)
    value = timed_public_id("msg", now=made)

    assert re.fullmatch(r"msg_[a-z0-9]{29}", value)
    assert public_id_time(value) == made
    assert len({timed_public_id("msg", now=made) for _ in range(1000)}) == 1000
    assert public_id_time(public_id("msg")) is None  # the older, all-random form


def test_ids_made_later_sort_later():
    earlier = timed_public_id("msg", now=datetime(2026, 1, 1, tzinfo=UTC))
    assert earlier[:13] < timed_public_id("msg")[:13]


def _plan(sql: str, params: list) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")  # tiny tables: only whether an index can serve counts
        try:
            cursor.execute("EXPLAIN " + sql, params)
            return "\n".join(row for (row,) in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")


@partitioned
def test_a_lookup_by_a_timed_id_reads_only_the_partitions_of_its_time():
    message = MessageFactory()
    with CaptureQueriesContext(connection) as queries:
        assert message_get(domain=message.domain, public_id=message.public_id) == message
    (query,) = [q["sql"] for q in queries.captured_queries if "messaging_message" in q["sql"]]

    plan = _plan(query, [])

    scanned = set(re.findall(r"on (messaging_message_\w+)", plan))
    assert 1 <= len(scanned) <= 2 and "messaging_message_default" not in scanned, plan


@partitioned
def test_an_id_of_the_older_form_still_resolves_through_each_partitions_index():
    message = MessageFactory(public_id=public_id("msg"))

    assert message_get(domain=message.domain, public_id=message.public_id) == message
    plan = _plan("SELECT id FROM messaging_message WHERE public_id = %s", [message.public_id])
    assert "Seq Scan" not in plan and "message_public_id_unique" in plan, plan


def test_a_message_whose_creation_time_was_moved_is_still_found():
    message = MessageFactory()
    Message.objects.filter(pk=message.pk).update(created_at=message.created_at - timedelta(days=3))

    assert message_by_public_id(Message.objects.all(), message.public_id) == message


@partitioned
def test_partition_history_skips_tables_already_partitioned(capsys):
    call_command("partition_history")
    assert "messaging_message: already partitioned" in capsys.readouterr().out


# --- the online path ----------------------------------------------------------------------------

PROBE, EXPECTED = "partition_probe", "partition_probe_expected"
INITIAL_ROWS = 6000


def _probe_tables() -> None:
    """A plain copy of the message table's shape (keys, indexes, identity) with rows, as an
    installation from before partitioning has it, and a plain table the writers keep in step."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE {PROBE} (LIKE messaging_message INCLUDING DEFAULTS INCLUDING CONSTRAINTS "
            "INCLUDING IDENTITY, "
            f"CONSTRAINT {PROBE}_pkey PRIMARY KEY (id), CONSTRAINT {PROBE}_public_id_unique UNIQUE (public_id))"
        )
        cursor.execute(f"CREATE INDEX {PROBE}_list_idx ON {PROBE} (domain_id, created_at DESC, public_id DESC)")
        cursor.execute(
            f'INSERT INTO {PROBE} (public_id, domain_id, direction, status, from_address, "to", cc, bcc, reply_to, '  # noqa: S608
            "subject, is_test, attempts, last_error, message_id_header, envelope_from, created_at, updated_at) "
            "SELECT 'msg_' || n, %s, 'sent', 'accepted', 'a@example.com', '[]', '[]', '[]', '[]', 's' || n, false, 0, "
            "'', '', '', now() - make_interval(days => n %% 5, secs => n), now() FROM generate_series(1, %s) n",
            [DomainFactory().pk, INITIAL_ROWS],
        )
        cursor.execute(f"CREATE TABLE {EXPECTED} AS SELECT * FROM {PROBE}")  # noqa: S608


def _writer(stop: threading.Event, writes: list[str]) -> None:
    """Inserts, status updates and deletes, each made to the probe and to the expected table alike."""
    rng = random.Random(7)
    try:
        while not stop.is_set():
            with transaction.atomic(), connection.cursor() as cursor:
                choice = rng.random()
                if choice < 0.4:
                    cursor.execute(
                        f'INSERT INTO {PROBE} (public_id, domain_id, direction, status, from_address, "to", cc, bcc, '  # noqa: S608
                        "reply_to, subject, is_test, attempts, last_error, message_id_header, envelope_from, "
                        "created_at, updated_at) "
                        "SELECT 'new_' || clock_timestamp(), domain_id, direction, status, from_address, \"to\", cc, "
                        "bcc, reply_to, subject, is_test, attempts, last_error, message_id_header, envelope_from, "
                        f"now(), now() FROM {EXPECTED} LIMIT 1 RETURNING *"
                    )
                    row = cursor.fetchone()
                    cursor.execute(
                        f"INSERT INTO {EXPECTED} VALUES ({', '.join(['%s'] * len(row))})",  # noqa: S608
                        list(row),
                    )
                    writes.append("insert")
                else:
                    target = rng.randint(1, INITIAL_ROWS)
                    verb = "delete" if choice > 0.9 else "update"
                    for table in (PROBE, EXPECTED):
                        if verb == "delete":
                            cursor.execute(f"DELETE FROM {table} WHERE id = %s", [target])  # noqa: S608
                        else:
                            cursor.execute(
                                f"UPDATE {table} SET status = 'delivered', attempts = attempts + 1, "  # noqa: S608
                                "updated_at = now() WHERE id = %s",
                                [target],
                            )
                    writes.append(verb)
            time.sleep(0.002)
    finally:
        connections.close_all()


@partitioned
@pytest.mark.django_db(transaction=True)
def test_a_plain_table_is_partitioned_online_while_rows_are_written_and_every_row_ends_identical():
    _probe_tables()
    stop, writes = threading.Event(), []
    writer = threading.Thread(target=_writer, args=(stop, writes))
    writer.start()
    writes_when_copy_began: list[int] = []
    try:
        time.sleep(0.1)
        copied = partition_table(
            PROBE,
            days_ahead=2,
            batch_size=300,
            rest_per_work=1.0,
            progress=lambda rows: writes_when_copy_began.append(len(writes)),
        )
    finally:
        stop.set()
        writer.join()
    try:
        assert is_partitioned(PROBE)
        assert copied >= INITIAL_ROWS * 0.8
        assert writes_when_copy_began[-1] > writes_when_copy_began[0], "no write happened during the copy"
        assert {"insert", "update", "delete"} <= set(writes)
        with connection.cursor() as cursor:
            for one, other in ((PROBE, EXPECTED), (EXPECTED, PROBE)):
                cursor.execute(f"SELECT count(*) FROM (SELECT * FROM {one} EXCEPT ALL SELECT * FROM {other}) d")  # noqa: S608
                assert cursor.fetchone()[0] == 0, f"rows of {one} missing from {other}"
            # New rows still take ids from the table's sequence, past every row copied.
            cursor.execute(f"SELECT max(id) FROM {EXPECTED}")  # noqa: S608
            (highest,) = cursor.fetchone()
            cursor.execute(
                f'INSERT INTO {PROBE} (public_id, domain_id, direction, status, from_address, "to", cc, bcc, '  # noqa: S608
                "reply_to, subject, is_test, attempts, last_error, message_id_header, envelope_from, created_at, "
                "updated_at) SELECT 'after', domain_id, direction, status, from_address, \"to\", cc, bcc, reply_to, "
                "subject, is_test, attempts, last_error, message_id_header, envelope_from, now(), now() "
                f"FROM {EXPECTED} LIMIT 1 RETURNING id"
            )
            assert cursor.fetchone()[0] > highest
            cursor.execute(
                f"SELECT indexdef FROM pg_indexes WHERE tablename = '{PROBE}' AND indexdef LIKE '%%UNIQUE%%'"  # noqa: S608
            )
            assert all("created_at" in definition for (definition,) in cursor.fetchall())
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {PROBE}, {EXPECTED}")
            cursor.execute(f"DROP FUNCTION IF EXISTS {PROBE}_mirror()")

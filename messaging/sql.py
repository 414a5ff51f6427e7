"""The hand-written PostgreSQL statements, together: each one does the work of one service's ORM
twin in a single round trip, and is named after the service it speeds up.

- message_send_in_one_statement: POST /v1/send's pause check, allowance count and INSERTs
  (messaging.services.message_send; twin: _store_in_transaction).
- messages_insert_in_one_statement: POST /v1/send/batch's INSERTs of the messages and their events
  (messaging.services.messages_store; twin: two bulk_create).
- dispatch_record_in_one_statement: a dispatch outcome's fenced UPDATE and event INSERTs
  (messaging.outbound.outcomes.record_outcome; twin: its transaction).
- inbound_store_in_one_statement: received mail for every verified recipient domain
  (messaging.inbound.services._store_on_verified_domains; twin: its transaction).

Each writes the same columns and values as the ORM would (`insert_fields`, `insert_values`).
The services call them only when `available()`; the test suite turns that off to run the ORM
twins on PostgreSQL as well (tests/conftest.py, the `sql_path` fixture).
"""

import dataclasses
from datetime import datetime
from functools import cache
from typing import Any

import psycopg
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper
from django.db.models import Field, Model
from django.utils import timezone

from domains.models import DailyUsage, Domain
from domains.sending import global_paused_sql, sending_paused_error
from domains.services import allowance_day_open, allowance_exhausted
from mailservice.doorbell import CHANNEL as DISPATCH_CHANNEL
from messaging.models import EventRecord, EventType, Message, MessageEvent, Status


def available() -> bool:
    """Whether the services use these statements: on PostgreSQL (the ORM twins run everywhere else)."""
    return connection.vendor == "postgresql"


# --- what an ORM INSERT would write ----------------------------------------------------------------


def insert_fields(
    model: type[Model], *, exclude: frozenset[str] = frozenset(), only: tuple[str, ...] | None = None
) -> list[Field]:
    """The columns an INSERT of `model` writes: every concrete field but the generated id and `exclude`
    (or just the fields named in `only`, in that order)."""
    if only is not None:
        by_name = {field.name: field for field in model._meta.concrete_fields}
        return [by_name[name] for name in only]
    return [field for field in model._meta.concrete_fields if not field.primary_key and field.name not in exclude]


def column_of(model: type[Model], name: str) -> str:
    """The column of a concrete field of `model` (never a reverse relation, which has none)."""
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.column is not None, name
    return field.column


def insert_columns(fields: list[Field]) -> list[str]:
    """The quoted columns of `fields`, in that order."""
    quote = connection.ops.quote_name
    return [quote(field.column) for field in fields if field.column is not None]


def _this_threads_connection() -> BaseDatabaseWrapper:
    """The connection itself, not `django.db.connection`: that proxy finds this thread's connection
    again (through asgiref's Local, 2 us) on every attribute access, which was half the cost of an
    INSERT's values (62 -> 40 us for a sent message's)."""
    return connections[DEFAULT_DB_ALIAS]


def insert_values(instance: Model, fields: list[Field]) -> list[Any]:
    """The values an INSERT of `instance` would send for `fields`, in that order."""
    database = _this_threads_connection()
    return [field.get_db_prep_save(field.pre_save(instance, add=True), database) for field in fields]


def _binding_cursor() -> CursorWrapper:
    """A server-side binding cursor on Django's connection, wrapped as connection.cursor() wraps its
    own, so it is logged and counted like any other query. The parameters travel apart from the
    query text instead of being quoted into it, which costs psycopg less: a send's statement took
    0.3 to 0.6 ms less of the web server's CPU, and quoting had been a tenth of a dispatch worker's
    (bench/results/before-after-accept-round-four.md, before-after-dispatch-round-four.md)."""
    database = _this_threads_connection()
    database.close_if_health_check_failed()  # what connection.cursor() would do first
    database.ensure_connection()
    binding = psycopg.Cursor(database.connection)
    # The stubs type these as taking Django's own wrapper; they take the DB-API cursor they wrap.
    make = database.make_debug_cursor if database.queries_logged else database.make_cursor
    return make(binding)  # type: ignore[arg-type]


# --- messaging.services.message_send --------------------------------------------------------------


def message_send_in_one_statement(domain: Domain, message: Message) -> None:
    """message_send's _store_in_transaction as one statement on PostgreSQL, as atomic as the transaction.

    The global pause check, the allowance count (allowance_consume's conditional UPDATE) and the
    message and event INSERTs in one data-modifying CTE: one round trip instead of six (pause
    SELECT, BEGIN, UPDATE, INSERT, INSERT, COMMIT) and no ORM query compilation, which were most
    of a send's cost beyond the framework's in the accept benchmark
    (bench/results/before-after-accept.md). The pause is read in the statement that stores the
    message, so a pause committed before it applies. Nothing is written unless the counter row
    was updated: paused, allowance used up, or no row yet for the day (the day's first send,
    which creates it and tries once more). A stored message also wakes the workers' dispatch
    loops at commit (messaging/outbound/loop.py), in place of a Celery task per message.
    """
    now = timezone.now()
    limited = domain.daily_allowance is not None
    event = MessageEvent(type=EventType.ACCEPTED)
    params = [
        domain.pk,
        now.date(),
        *([domain.daily_allowance] if limited else []),
        *insert_values(message, insert_fields(Message)),
        *insert_values(event, insert_fields(MessageEvent, exclude=_EVENT_OWN_COLUMNS)),
    ]
    for first_try in (True, False):
        with _binding_cursor() as cursor:
            cursor.execute(_message_send_statement(limited=limited), params)
            paused, message_pk, _ = cursor.fetchone()
        if paused:
            raise sending_paused_error()
        if message_pk is not None:
            message.pk = message_pk
            message._state.adding, message._state.db = False, connection.alias
            return
        if first_try:
            allowance_day_open(domain=domain, day=now.date())
    raise allowance_exhausted(domain=domain, now=now)


# The statement takes these from the message INSERT's RETURNING.
_EVENT_OWN_COLUMNS = frozenset({"message", "domain", "is_test"})
_EVENT_OF_MESSAGE = '"message_id", "domain_id", "is_test"'  # and as the event INSERT names them


@cache
def _message_send_statement(*, limited: bool) -> str:
    """The statement of message_send_in_one_statement; parameters: domain id, day, [allowance], the
    message's insert_values, the event's (without its message). Returns (paused, message id or NULL, NULL)."""
    quote = connection.ops.quote_name
    message_columns = insert_columns(insert_fields(Message))
    event_columns = insert_columns(insert_fields(MessageEvent, exclude=_EVENT_OWN_COLUMNS))
    allowance = ' AND "sent_count" < %s' if limited else ""
    # Only the models' own identifiers are interpolated; every value is a parameter.
    return (
        f"WITH control AS (SELECT {global_paused_sql()} AS paused), "  # noqa: S608
        f'counted AS (UPDATE {quote(DailyUsage._meta.db_table)} SET "sent_count" = "sent_count" + 1 '
        f'WHERE "domain_id" = %s AND "day" = %s{allowance} AND NOT (SELECT paused FROM control) RETURNING 1), '
        f"message AS (INSERT INTO {quote(Message._meta.db_table)} ({', '.join(message_columns)}) "
        f'SELECT {", ".join(["%s"] * len(message_columns))} FROM counted RETURNING "id", "domain_id", "is_test"), '
        f"event AS (INSERT INTO {quote(MessageEvent._meta.db_table)} "
        f"({_EVENT_OF_MESSAGE}, {', '.join(event_columns)}) "
        f"SELECT message.id, message.domain_id, message.is_test, {', '.join(['%s'] * len(event_columns))} "
        "FROM message) "
        "SELECT (SELECT paused FROM control), (SELECT id FROM message), "
        f"(SELECT pg_notify('{DISPATCH_CHANNEL}', '') FROM message)"
    )


# --- messaging.services.messages_store --------------------------------------------------------------


def messages_insert_in_one_statement(messages: list[Message]) -> None:
    """messages_store's two bulk_create as one statement on PostgreSQL: the messages' INSERT and their
    `accepted` events' INSERT in a data-modifying CTE, with NOTIFY for the dispatch loops (delivered at
    commit). Each column travels as one array parameter, bound on the server and unnested into rows:
    the ORM's compilation and Django's client-side quoting of a batch of 100 were 60 % of its time, and
    a placeholder per value (2 500 of them) made psycopg's parsing of the query 54 ms of it."""
    fields = insert_fields(Message)
    rows = [insert_values(message, fields) for message in messages]
    event = insert_values(
        MessageEvent(type=EventType.ACCEPTED), insert_fields(MessageEvent, exclude=_EVENT_OWN_COLUMNS)
    )
    with _binding_cursor() as cursor:
        cursor.execute(_messages_insert_statement(), [*(list(column) for column in zip(*rows, strict=True)), *event])
        stored = {public_id: pk for pk, public_id, _ in cursor.fetchall()}
    for message in messages:
        message.pk = stored[message.public_id]
        message._state.adding, message._state.db = False, connection.alias


@cache
def _messages_insert_statement() -> str:
    """The statement of messages_insert_in_one_statement; parameters: an array per column of the
    messages' insert_values, then one event's (without its message). Returns (id, public_id, NULL) per message."""
    quote = connection.ops.quote_name
    fields = insert_fields(Message)
    arrays = ", ".join(f"CAST(%s AS {field.db_type(connection)}[])" for field in fields)
    event_columns = insert_columns(insert_fields(MessageEvent, exclude=_EVENT_OWN_COLUMNS))
    # Only the models' own identifiers and types are interpolated; every value is a parameter.
    return (
        f"WITH message AS (INSERT INTO {quote(Message._meta.db_table)} ({', '.join(insert_columns(fields))}) "  # noqa: S608
        f'SELECT * FROM unnest({arrays}) RETURNING "id", "public_id", "domain_id", "is_test"), '
        f"event AS (INSERT INTO {quote(MessageEvent._meta.db_table)} "
        f"({_EVENT_OF_MESSAGE}, {', '.join(event_columns)}) "
        f"SELECT message.id, message.domain_id, message.is_test, {', '.join(['%s'] * len(event_columns))} "
        "FROM message) "
        f"SELECT id, public_id, (SELECT pg_notify('{DISPATCH_CHANNEL}', '')) FROM message"
    )


# --- messaging.outbound.outcomes.record_outcome --------------------------------------------------------------------


_EVENT_RECORD_FIELDS = [field.name for field in dataclasses.fields(EventRecord)]


@cache
def _event_record_columns() -> tuple[str, str]:
    """An EventRecord's columns: as the INSERT names them, and as its SELECT takes them from the VALUES list
    (a column that may be NULL in every row, the reply code, is cast: VALUES would make it text)."""
    quote = connection.ops.quote_name
    fields = [MessageEvent._meta.get_field(name) for name in _EVENT_RECORD_FIELDS]
    columns = ", ".join(quote(column_of(MessageEvent, field.name)) for field in fields)
    taken = ", ".join(
        f"event.{field.name}"
        if field.get_internal_type() in ("CharField", "TextField")
        else f"CAST(event.{field.name} AS {field.db_type(connection)})"
        for field in fields
    )
    return columns, taken


def dispatch_record_in_one_statement(
    message: Message, fields: dict[str, Any], events: list[EventRecord], now: datetime
) -> bool:
    """dispatch's _record as one statement on PostgreSQL: the conditional UPDATE and the events' INSERT in a
    data-modifying CTE, atomic like the transaction it replaces but one round trip instead of four
    (BEGIN, UPDATE, INSERT, COMMIT): the dispatch benchmark's workers spent a fifth of their time there."""
    assignments = ", ".join(f'"{column_of(Message, name)}" = %s' for name in fields)
    columns, taken = _event_record_columns()
    row = f"({', '.join(['%s'] * (1 + len(_EVENT_RECORD_FIELDS)))})"
    # Only the models' own identifiers and placeholders are interpolated; every value is a parameter.
    sql = (
        f'WITH mine AS (UPDATE "{Message._meta.db_table}" SET {assignments}, "updated_at" = %s '  # noqa: S608
        'WHERE "id" = %s AND "created_at" = %s AND "status" = %s AND "lease_expires_at" = %s '
        'RETURNING "id", "domain_id", "is_test") '
        f'INSERT INTO "{MessageEvent._meta.db_table}" ({_EVENT_OF_MESSAGE}, {columns}, "created_at", "updated_at") '
        f"SELECT mine.id, mine.domain_id, mine.is_test, {taken}, %s, %s "
        f"FROM mine CROSS JOIN (VALUES {', '.join([row] * len(events))}) "
        f"AS event (n, {', '.join(_EVENT_RECORD_FIELDS)}) ORDER BY event.n"
    )
    # created_at beside the id names the message's day partition when the plan is made: by id alone, PostgreSQL
    # plans the UPDATE against every partition (0.36 ms of planning with 9 of them, 0.11 ms with created_at).
    params = [
        *fields.values(),
        now,
        message.pk,
        message.created_at,
        Status.ACCEPTED,
        message.lease_expires_at,
        now,
        now,
    ]
    params += [value for n, event in enumerate(events) for value in (n, *dataclasses.astuple(event))]
    with _binding_cursor() as cursor:
        cursor.execute(sql, params)
        # Every outcome carries at least one event, so no row inserted means no row updated: the lease was lost.
        return cursor.rowcount > 0


# --- messaging.inbound.services._store_on_verified_domains -----------------------------------------


def inbound_store_in_one_statement(messages: dict[str, Message], *, detail: str) -> set[str]:
    """inbound's _store_on_verified_domains as one statement on PostgreSQL: the domain check and the INSERTs of the
    messages and of their events in a data-modifying CTE, atomic on its own, so one round trip instead of
    five (the domain query, BEGIN, two INSERTs, COMMIT). The messages differ only in public id and recipients."""
    quote = connection.ops.quote_name
    per_row = insert_fields(Message, only=("public_id", "to"))
    # Every other column Django would insert, with the value it would (defaults and auto_now included).
    shared = insert_fields(Message, exclude=frozenset({"domain", "public_id", "to"}))
    shared_values = insert_values(next(iter(messages.values())), shared)
    rows = [[name, *insert_values(message, per_row)] for name, message in messages.items()]
    columns = ", ".join(insert_columns([*insert_fields(Message, only=("domain",)), *per_row, *shared]))
    now = timezone.now()
    # Only the models' own identifiers and placeholders are interpolated; every value is a parameter.
    sql = (
        f"WITH recipient (domain_name, public_id, addresses) AS (VALUES {', '.join(['(%s, %s, %s)'] * len(rows))}), "  # noqa: S608
        f"message AS (INSERT INTO {quote(Message._meta.db_table)} ({columns}) "
        f"SELECT domain.id, recipient.public_id, recipient.addresses, {', '.join(['%s'] * len(shared))} "
        f"FROM recipient JOIN {quote(Domain._meta.db_table)} AS domain "
        "ON domain.name = recipient.domain_name AND domain.verified RETURNING id, public_id, domain_id, is_test), "
        f"event AS (INSERT INTO {quote(MessageEvent._meta.db_table)} "
        f'({_EVENT_OF_MESSAGE}, "type", "recipient", "detail", "created_at", "updated_at") '
        "SELECT message.id, message.domain_id, message.is_test, %s, '', %s, %s, %s FROM message) "
        "SELECT public_id FROM message"
    )
    params = [value for row in rows for value in row] + shared_values + [EventType.RECEIVED, detail, now, now]
    # Server-side binding: the raw source travels as a binary parameter. Django's client-side
    # binding would first spell it out as hex inside the query text, six times the message's size
    # in memory (a 20 MiB message peaked at 123 MiB).
    with _binding_cursor() as cursor:
        cursor.execute(sql, params)
        stored = {public_id for (public_id,) in cursor.fetchall()}
    return {name for name, message in messages.items() if message.public_id in stored}

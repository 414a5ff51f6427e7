"""Sizing: PostgreSQL bytes and WAL per message, for docs/scaling.md's database size per day.

Each case sends `--messages` messages through the product's own send path (messaging.services.
message_send, one transaction each, as the API's), dispatches them with dispatch_batch (DKIM-signed,
over SMTP) to bench.sink, fans the events out to one webhook endpoint that wants every event
(webhooks.services.events_fan_out) and records each delivery as the webhooks worker records a
204: claimed, then webhooks.services._record, with no HTTP request, which leaves nothing in the
tables. Then VACUUM ANALYZE, and pg_table_size / pg_indexes_size of the message, event and webhook
delivery tables, per message. A second figure after VACUUM FULL is the compact lower bound: the
first keeps the space the claims' and outcomes' updates left, which autovacuum hands to new rows.
WAL is pg_current_wal_lsn's advance over the case: the whole cluster's, so an upper bound on a
shared server.

Runs last in `bench all`: it empties the message tables (TRUNCATE … CASCADE) before each case, so
only its own rows are measured.
"""

import argparse
import random
from dataclasses import dataclass

from bench.report import Section
from bench.scenario import Context, Scenario
from bench.stack import BenchError, discard_sink

DOMAIN = "sizing.bench.example"
SENDER = f"Acme Shop <orders@{DOMAIN}>"
TABLES = {  # what docs/scaling.md calls each table
    "messaging_message": "messages",
    "messaging_messageevent": "events",
    "webhooks_webhookdelivery": "webhook deliveries",
}
# Words of a shipping notice, drawn at random with a fixed seed: text that compresses like mail does
# (a repeated sentence would let TOAST's compression shrink the bodies far below real mail's).
SHIPPING_NOTICE = (
    "your order has shipped and is on its way to the address you gave us tracking number parcel "
    "carrier delivery expected within three working days if you are not at home the driver will "
    "leave a card with instructions for collecting it from a nearby pickup point thank you for "
    "shopping with us questions about returns refunds invoices warranty contact our support team "
    "reply to this message item quantity price subtotal shipping total tax included"
)


@dataclass(frozen=True)
class Case:
    recipients: int
    messages: int


@dataclass(frozen=True)
class TableSize:
    rows: int
    table_bytes: int  # heap, TOAST, free space and visibility maps
    index_bytes: int


@dataclass(frozen=True)
class Measured:
    case: Case
    vacuumed: dict[str, TableSize]
    compact: dict[str, TableSize]
    wal_bytes: int
    commits: int  # in this database, over the same span


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=5000, help="one-recipient messages (default 5000)")
    parser.add_argument("--wide-messages", type=int, default=500, help="messages to 50 recipients each (default 500)")


def _bodies() -> tuple[str, str]:
    """A text part of about 1,200 characters and its HTML of about 1,500: a typical 2-3 kB body."""
    chooser, words = random.Random(33), SHIPPING_NOTICE.split()

    def paragraph() -> str:
        return " ".join(chooser.choice(words) for _ in range(40)).capitalize() + "."

    paragraphs = [paragraph() for _ in range(5)]
    text = "Hello Sam,\n\n" + "\n\n".join(paragraphs) + "\n\nAcme Shop\n"
    html = "<p>Hello Sam,</p>\n" + "\n".join(f"<p>{p}</p>" for p in paragraphs) + "\n<p><b>Acme Shop</b></p>\n"
    return text, html


def _empty_tables() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {', '.join(TABLES)} CASCADE")


def _wal_position() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_current_wal_lsn()")
        return cursor.fetchone()[0]


def _wal_since(start: str) -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s)", [start])
        return int(cursor.fetchone()[0])


def _commits() -> int:
    """Transactions committed in this database so far (autocommit reads too), this process's own
    included: the scenario's work all runs on this process's one connection, whose counters are flushed first."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def _sizes(vacuum: str) -> dict[str, TableSize]:
    from django.db import connection

    sizes = {}
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"{vacuum} {table}")
            # Summed over the partitions' tables (a partitioned parent holds nothing itself); a plain
            # table is its own one leaf.
            cursor.execute(
                "SELECT coalesce(sum(c.reltuples), 0)::bigint, coalesce(sum(pg_table_size(t.relid)), 0),"
                " coalesce(sum(pg_indexes_size(t.relid)), 0)"
                " FROM pg_partition_tree(%s::regclass) t JOIN pg_class c ON c.oid = t.relid WHERE t.isleaf",
                [table],
            )
            rows, table_bytes, index_bytes = cursor.fetchone()
            sizes[table] = TableSize(rows=rows, table_bytes=table_bytes, index_bytes=index_bytes)
    return sizes


def _send(domain, case: Case, text: str, html: str) -> None:
    from messaging.services import SendRequest, message_send

    for n in range(case.messages):
        to = [f"customer{n}.{r}@example.org" for r in range(case.recipients)]
        request = SendRequest(
            from_address=SENDER,
            to=to,
            cc=[],
            bcc=[],
            reply_to=[],
            subject=f"Your order #{n} has shipped",
            text=text,
            html=html,
        )
        message_send(domain=domain, request=request)


def _dispatch(sink_port: int) -> None:
    from django.test import override_settings

    from messaging.models import Message, Status
    from messaging.outbound.dispatch import dispatch_batch

    with override_settings(EMAIL_URL=f"smtp://127.0.0.1:{sink_port}"):
        while dispatch_batch():
            pass
    left = Message.objects.filter(status=Status.ACCEPTED).count()
    if left:
        raise BenchError(f"sizing: {left} message(s) still accepted after dispatch to the sink")


def _webhooks(endpoint) -> None:
    from django.conf import settings

    from webhooks.services import AttemptResult, _record, deliveries_claim, events_fan_out

    while events_fan_out():
        pass
    delivered = AttemptResult(status_code=204, latency_ms=12, error="")
    while claimed := deliveries_claim(endpoint_id=endpoint.pk, limit=settings.MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY):
        for delivery in claimed:
            _record(delivery, delivered)


def _measure(domain, endpoint, case: Case, sink_port: int) -> Measured:
    text, html = _bodies()
    _empty_tables()
    start, commits = _wal_position(), _commits()
    _send(domain, case, text, html)
    _dispatch(sink_port)
    _webhooks(endpoint)
    wal_bytes, commits = _wal_since(start), _commits() - commits
    return Measured(
        case=case,
        vacuumed=_sizes("VACUUM ANALYZE"),
        compact=_sizes("VACUUM FULL"),
        wal_bytes=wal_bytes,
        commits=commits,
    )


def _per_message(value: int, measured: Measured) -> str:
    return f"{value / measured.case.messages:,.0f}"


def _rows(measured: Measured) -> list[list[str]]:
    label = f"{measured.case.recipients} recipient" + ("s" if measured.case.recipients > 1 else "")
    rows = []
    for table, name in TABLES.items():
        size, compact = measured.vacuumed[table], measured.compact[table]
        rows.append(
            [
                label,
                name,
                f"{size.rows / measured.case.messages:.1f}",
                _per_message(size.table_bytes, measured),
                _per_message(size.index_bytes, measured),
                _per_message(size.table_bytes + size.index_bytes, measured),
                _per_message(compact.table_bytes + compact.index_bytes, measured),
            ]
        )
    total = sum(size.table_bytes + size.index_bytes for size in measured.vacuumed.values())
    compact_total = sum(size.table_bytes + size.index_bytes for size in measured.compact.values())
    rows.append(
        [label, "**all three**", "", "", "", _per_message(total, measured), _per_message(compact_total, measured)]
    )
    return rows


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    if min(args.messages, args.wide_messages) < 1:
        raise BenchError("sizing: --messages and --wide-messages must be positive")
    from django.test import override_settings

    from domains.services import domain_create
    from webhooks.services import endpoint_create

    cases = [Case(recipients=1, messages=args.messages), Case(recipients=50, messages=args.wide_messages)]
    domain = domain_create(name=DOMAIN, verified=True, actor="bench")
    with override_settings(MAILSERVICE_WEBHOOK_ALLOW_PRIVATE=True):
        endpoint = endpoint_create(domain=domain, url="http://127.0.0.1:9/mail-events", event_types=[]).endpoint
    with discard_sink() as sink:
        results = [_measure(domain, endpoint, case, sink.port) for case in cases]
    text, html = _bodies()
    section = Section(
        title="14. Database size per message",
        summary=(
            f"Messages sent through the product's send path (text {len(text):,} and HTML {len(html):,} characters), "
            "dispatched DKIM-signed to a discarding SMTP sink, their events fanned out to one webhook endpoint that "
            "wants every event and each delivery recorded as a 204; then VACUUM ANALYZE and each table's size "
            "(pg_table_size: heap and TOAST; pg_indexes_size; summed over the day partitions on PostgreSQL), per "
            "message sent, and again after VACUUM FULL."
        ),
        header=[
            "messages",
            "table",
            "rows per message",
            "table bytes per message",
            "index bytes per message",
            "bytes per message",
            "after VACUUM FULL",
        ],
        rows=[row for measured in results for row in _rows(measured)],
    )
    for measured in results:
        section.notes.append(
            f"{measured.case.messages:,} messages to {measured.case.recipients} recipient(s) each: "
            f"{measured.wal_bytes / measured.case.messages:,.0f} bytes of WAL per message, from the first send to "
            "the last webhook delivery recorded (the whole cluster's WAL: on a shared server, an upper bound); "
            f"{measured.commits / measured.case.messages:.1f} transactions committed per message "
            "(this database's xact_commit: read-only ones count too)."
        )
    section.notes.append(
        "The first figure keeps the free space that claims and outcomes (each an UPDATE of the row) leave behind, "
        "which autovacuum hands to new rows of a table that keeps growing: the steady state lies between the two. "
        "The empty day partitions made ahead count too (each index of each partition takes at least one 8 kB page): "
        "at the tiny size they are most of the index bytes."
    )
    return [section]


SCENARIO = Scenario(
    name="sizing",
    help="PostgreSQL bytes and WAL per message (message, event and webhook delivery tables)",
    add_arguments=add_arguments,
    tiny={"messages": 50, "wide_messages": 5},
    run=run,
)

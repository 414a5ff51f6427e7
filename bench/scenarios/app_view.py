"""Scenario 15, the application's view: GET /v1/suppressions and GET /v1/events as a domain's lists grow
(issue 44's goals: a page's p50 at 1,000,000 suppressions and at 10,000,000 events within 1.3 of its p50 at
10,000).

Two domains in the same tables, a small one and a large one. Rows are made in PostgreSQL by
generate_series (no round trip per row), with the tables' plain indexes dropped during the load and
rebuilt from their own definitions, as listing.py does. Events belong to messages (five each: accepted,
then delivered or deferred), spread over at most listing.HISTORY_DAYS days of day partitions, so a page
of events reads the partitions as the service's retention leaves them. Latency is measured one request
at a time in interleaved rounds (small, large, small, …), and the queries are EXPLAINed at both sizes.
"""

import argparse
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from bench.load import LoadResult, Target, make_target, run_load
from bench.report import Ratio, Section, ms
from bench.scenario import Context, Scenario
from bench.scenarios.listing import partitions_for, spacing_for
from bench.stack import BenchError, create_key, server, server_env

SMALL_DOMAIN = "small.appview.bench.example"
LARGE_DOMAIN = "large.appview.bench.example"
PAGE_SIZE = 20
EVENTS_PER_MESSAGE = 5
SUPPRESSIONS_FIRST = "suppressions, first page"
EVENTS_FIRST = "events, first page (oldest)"
EVENTS_HALFWAY = "events, a page halfway down the cursor chain"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--suppressions-small", type=int, default=10_000, help="the small domain's (10 000)")
    parser.add_argument("--suppressions-large", type=int, default=1_000_000, help="the large domain's (1 000 000)")
    parser.add_argument("--events-small", type=int, default=10_000, help="the small domain's events (10 000)")
    parser.add_argument("--events-large", type=int, default=10_000_000, help="the large domain's (10 000 000)")
    parser.add_argument("--requests", type=int, default=300, help="requests per list and size (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds the requests are split over")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")


def _plain_indexes(cursor, table: str) -> list[tuple[str, str]]:
    """(name, definition) of the table's indexes that no constraint owns."""
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN "
        "(SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        [table, table],
    )
    return cursor.fetchall()


def _rebuild(cursor, table: str, indexes: list[tuple[str, str]]) -> None:
    cursor.execute("SET maintenance_work_mem = '256MB'")
    for _, definition in indexes:
        # A partitioned table's index is defined ON ONLY the parent; built as such it would cover no partition.
        cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
    cursor.execute(f"VACUUM (ANALYZE) {table}")


def _load_suppressions(counts: dict[int, int], origin: datetime) -> None:
    """`count` suppressions of each domain id, a second apart back from origin; a mix of reasons."""
    from django.db import connection

    with connection.cursor() as cursor:
        indexes = _plain_indexes(cursor, "messaging_suppression")
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
        for domain_id, count in counts.items():
            cursor.execute(
                "INSERT INTO messaging_suppression "
                "(domain_id, is_test, address, reason, detail, expires_at, source_message_id, created_at, updated_at) "
                "SELECT %s, false, 'user' || i || '@example.org', "
                "(ARRAY['bounce', 'complaint', 'manual', 'bounce'])[i %% 4 + 1], '', NULL, NULL, "
                "%s - i * interval '1 second', %s - i * interval '1 second' FROM generate_series(0, %s - 1) AS i",
                [domain_id, origin, origin, count],
            )
        _rebuild(cursor, "messaging_suppression", indexes)


def _load_events(counts: dict[int, int], origin: datetime) -> None:
    """Each domain's `count` events: count / EVENTS_PER_MESSAGE messages, each with its events a second apart,
    the messages spread back from origin over at most listing.HISTORY_DAYS days."""
    from django.db import connection

    largest = max(counts.values()) // EVENTS_PER_MESSAGE
    spacing = spacing_for(largest)
    partitions_for(origin=origin + timedelta(minutes=1), span=spacing * largest + timedelta(minutes=1))
    with connection.cursor() as cursor:
        indexes = {table: _plain_indexes(cursor, table) for table in ("messaging_message", "messaging_messageevent")}
        for name, _ in (index for table in indexes.values() for index in table):
            cursor.execute(f'DROP INDEX "{name}"')
        for domain_id, count in counts.items():
            messages = count // EVENTS_PER_MESSAGE
            cursor.execute(
                'INSERT INTO messaging_message (public_id, domain_id, direction, status, from_address, "to", cc, bcc, '
                "reply_to, subject, text, html, attempts, last_error, message_id_header, envelope_from, is_test, "
                "created_at, updated_at) "
                "SELECT 'msg_bench' || %s || '_' || i, %s, 'sent', 'delivered', 'app@bench.example', "
                "'[\"customer@example.org\"]', '[]', '[]', '[]', 'Order ' || i, NULL, NULL, 1, '', '', '', false, "
                "%s - i * %s, %s - i * %s FROM generate_series(0, %s - 1) AS i",
                [domain_id, domain_id, origin, spacing, origin, spacing, messages],
            )
            cursor.execute(
                "INSERT INTO messaging_messageevent (message_id, domain_id, is_test, type, recipient, detail, "
                "smtp_code, enhanced_status, diagnostic, bounce_type, remote_host, feedback_type, cause, fix_check, "
                "published_at, created_at, updated_at) "
                "SELECT message.id, message.domain_id, false, "
                "CASE WHEN k = 0 THEN 'accepted' WHEN k = %s - 1 THEN 'delivered' ELSE 'deferred' END, "
                "CASE WHEN k = 0 THEN '' ELSE 'customer@example.org' END, '', "
                "CASE WHEN k = 0 THEN NULL WHEN k = %s - 1 THEN 250 ELSE 451 END, '', '', '', '', '', '', '', "
                "message.created_at, message.created_at + k * interval '1 second', "
                "message.created_at + k * interval '1 second' "
                "FROM messaging_message AS message CROSS JOIN generate_series(0, %s - 1) AS k "
                "WHERE message.domain_id = %s",
                [EVENTS_PER_MESSAGE, EVENTS_PER_MESSAGE, EVENTS_PER_MESSAGE, domain_id],
            )
        for table, table_indexes in indexes.items():
            _rebuild(cursor, table, table_indexes)


def _captured(call) -> list[tuple[str, tuple]]:
    """The SQL a selector runs, captured from the selector itself."""
    from django.db import connection

    captured = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        call()
    return captured


def _explain(queries: list[tuple[str, tuple]], table: str) -> str:
    from django.db import connection

    plans = []
    with connection.cursor() as cursor:
        for sql, params in queries:
            if f'"{table}"' in sql:
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
    return "\n\n".join(plans)


def _event_cursor(domain, position: int) -> str:
    """The cursor a client holds after paging down the stream to event `position`."""
    from messaging.models import MessageEvent
    from messaging.selectors import event_cursor
    from webhooks.payloads import recorded_types

    last = MessageEvent.objects.filter(domain=domain, is_test=False).order_by("created_at", "id")[position]
    return event_cursor(domain=domain, is_test=False, types=recorded_types([]), since=None, last=last)


def _targets(base_url: str, token: str, halfway: str) -> dict[str, Target]:
    paths = {
        SUPPRESSIONS_FIRST: [f"/v1/suppressions?limit={PAGE_SIZE}"],
        EVENTS_FIRST: [f"/v1/events?limit={PAGE_SIZE}"],
        EVENTS_HALFWAY: [f"/v1/events?limit={PAGE_SIZE}&after={halfway}"],
    }
    return {name: make_target(base_url, method="GET", paths=p, token=token) for name, p in paths.items()}


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from domains.models import Domain
    from messaging.selectors import event_page
    from messaging.suppressions import suppression_page
    from webhooks.payloads import recorded_types

    if not (0 < args.suppressions_small < args.suppressions_large and 0 < args.events_small < args.events_large):
        raise BenchError("app_view: each small size must be positive and less than its large size")
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    tokens = {name: create_key(env, domain=name) for name in (SMALL_DOMAIN, LARGE_DOMAIN)}
    small, large = Domain.objects.get(name=SMALL_DOMAIN), Domain.objects.get(name=LARGE_DOMAIN)
    origin = datetime.now(UTC) - timedelta(hours=1)
    started = time.perf_counter()
    _load_suppressions({small.pk: args.suppressions_small, large.pk: args.suppressions_large}, origin)
    suppressions_seconds = time.perf_counter() - started
    started = time.perf_counter()
    _load_events({small.pk: args.events_small, large.pk: args.events_large}, origin)
    events_seconds = time.perf_counter() - started

    halfway = {
        domain.pk: _event_cursor(domain, size // 2)
        for domain, size in ((small, args.events_small), (large, args.events_large))
    }
    results: dict[str, dict[str, LoadResult]] = {name: defaultdict(LoadResult) for name in (SMALL_DOMAIN, LARGE_DOMAIN)}
    with server(env, workers=args.workers) as base_url:
        targets = {
            domain.name: _targets(base_url, tokens[domain.name], halfway[domain.pk]) for domain in (small, large)
        }
        for target in (t for by_kind in targets.values() for t in by_kind.values()):
            run_load(target, total=10)  # warm-up
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for name, by_kind in targets.items():
                for kind, target in by_kind.items():
                    results[name][kind].merge(run_load(target, total=per_round))

    sizes = {
        SUPPRESSIONS_FIRST: (args.suppressions_small, args.suppressions_large),
        EVENTS_FIRST: (args.events_small, args.events_large),
        EVENTS_HALFWAY: (args.events_small, args.events_large),
    }
    section = Section(
        title="15. The application's view: suppressions and events",
        summary=(
            f"`GET /v1/suppressions` and `GET /v1/events` (limit {PAGE_SIZE}) for a key whose domain holds few and "
            f"for one whose domain holds many, in the same tables; {per_round * args.rounds} requests per row and "
            f"size, one at a time, in {args.rounds} interleaved rounds."
        ),
        header=["request", "small", "p50", "p99", "large", "p50", "p99", "errors"],
    )
    for kind, (few, many) in sizes.items():
        s, lg = results[SMALL_DOMAIN][kind], results[LARGE_DOMAIN][kind]
        errors = ", ".join(e for e in (s.describe_errors(), lg.describe_errors()) if e)
        section.rows.append(
            [kind, f"{few:,}", ms(s.percentile_ms(50)), ms(s.percentile_ms(99))]
            + [f"{many:,}", ms(lg.percentile_ms(50)), ms(lg.percentile_ms(99))]
            + [str(s.errors + lg.errors) + (f" ({errors})" if errors else "")]
        )
        section.failed_requests += s.errors + lg.errors
        ratio = lg.percentile_ms(50) / s.percentile_ms(50)
        section.ratios.append(Ratio(f"p50 {many:,} / {few:,}, {kind}", ratio, "<= 1.3", ratio <= 1.3))
    section.notes.append(
        f"Loading {args.suppressions_small + args.suppressions_large:,} suppressions took {suppressions_seconds:.1f} s "
        f"and {args.events_small + args.events_large:,} events (with their messages) {events_seconds:.1f} s: "
        "generate_series, index rebuild and VACUUM ANALYZE."
    )
    for domain, few_or_many in ((small, "small"), (large, "large")):
        plans = {
            "suppressions, first page": _explain(
                _captured(
                    lambda d=domain: suppression_page(
                        domain=d, is_test=False, limit=PAGE_SIZE, after=None, reason=None, address=None
                    )
                ),
                "messaging_suppression",
            ),
            "events, a page halfway down": _explain(
                _captured(
                    lambda d=domain: event_page(
                        domain=d,
                        is_test=False,
                        types=recorded_types([]),
                        since=None,
                        limit=PAGE_SIZE,
                        after=halfway[d.pk],
                    )
                ),
                "messaging_messageevent",
            ),
        }
        for page, plan in plans.items():
            heading = f"EXPLAIN (ANALYZE, BUFFERS) of the {page} query, {few_or_many} domain:"
            section.details.append(f"{heading}\n\n```\n{plan}\n```")
    return [section]


SCENARIO = Scenario(
    name="app_view",
    help="GET /v1/suppressions and GET /v1/events latency for a small and a large domain",
    add_arguments=add_arguments,
    tiny={
        "suppressions_small": 200,
        "suppressions_large": 2000,
        "events_small": 200,
        "events_large": 2000,
        "requests": 10,
        "rounds": 2,
        "workers": 1,
    },
    run=run,
)

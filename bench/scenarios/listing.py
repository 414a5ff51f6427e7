"""Scenario 3, list scaling: GET /v1/messages and /v1/messages/{id} as a domain's history grows.

Two domains in one table, one with `--small` messages and one with `--large`, plus a quarter
as many again in a third: loaded with PostgreSQL COPY (text format, large blocks; the table's
plain indexes are dropped during the load and rebuilt from their own definitions, as a bulk
load should). Latency is measured one request at a time (concurrency 1), so it is the cost of
a request, not queueing, and in interleaved rounds (small, large, small, …), so the drift of a
shared machine's load falls on both sizes alike. The list query is EXPLAINed at both sizes.

On PostgreSQL the table is partitioned by day: the day partitions the history spans are made before
the load, and the rows are spread over at most HISTORY_DAYS days (as retention keeps them), with
public ids that carry their creation time, as the service makes them.
"""

import argparse
import re
import time
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from bench import plots
from bench.load import LoadResult, Target, make_target, run_load
from bench.report import Ratio, Section, ms
from bench.scenario import Context, Scenario
from bench.stack import BenchError, create_key, server, server_env

SMALL_DOMAIN = "small.bench.example"
LARGE_DOMAIN = "large.bench.example"
OTHER_DOMAIN = "other.bench.example"
PAGE_SIZE = 20
FIRST_PAGE = "list, first page"
HALFWAY = "list, a page halfway down the cursor chain"
_COLUMNS = (
    'public_id, domain_id, direction, status, from_address, "to", cc, bcc, reply_to, subject, text, html, '
    "attempts, last_error, message_id_header, envelope_from, is_test, created_at, updated_at"
)
_BLOCK = 50_000  # rows per COPY write: big enough that Python's per-call cost vanishes
# The longest history loaded, in days: 30 days' retention; a bigger history is denser, not longer.
HISTORY_DAYS = 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small", type=int, default=10_000, help="messages in the small domain (10 000)")
    parser.add_argument("--large", type=int, default=10_000_000, help="messages in the large domain (10 000 000)")
    parser.add_argument("--requests", type=int, default=300, help="requests per endpoint and size (default 300)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds the requests are split over")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")


def spacing_for(count: int) -> timedelta:
    """The time between two messages of a history of `count`: a second, or less when that would take
    more than HISTORY_DAYS days."""
    return min(timedelta(seconds=1), timedelta(days=HISTORY_DAYS) / max(count, 1))


def partitions_for(*, origin: datetime, span: timedelta) -> None:
    """The day partitions of messages and events from origin - span to origin (PostgreSQL, partitioned)."""
    from mailservice.partitions import partitions_ensure
    from messaging.partitioning import HISTORY_TABLES, history_partitioned

    if not history_partitioned():
        return
    first, last = (origin - span).astimezone(UTC).date(), origin.astimezone(UTC).date()
    days = [first + timedelta(days=n) for n in range((last - first).days + 1)]
    for table in HISTORY_TABLES:
        partitions_ensure(table, days=days)


def _copy_messages(
    *, domain_id: int, domain_name: str, count: int, origin: datetime, spacing: timedelta = timedelta(seconds=1)
) -> None:
    """A domain's history of `count` messages, message i created i spacings before origin.

    Every tenth is a received message, the rest delivered: a plausible mix for the list."""
    from django.db import connection

    from mailservice.ids import timed_public_id

    sent = f'sent\tdelivered\tapp@{domain_name}\t["customer@example.org"]\t[]\t[]\t[]'
    received = f'received\treceived\tcustomer@example.org\t["support@{domain_name}"]\t[]\t[]\t[]'
    with connection.cursor() as cursor, cursor.copy(f"COPY messaging_message ({_COLUMNS}) FROM STDIN") as copy:
        for start in range(0, count, _BLOCK):
            lines = []
            for i in range(start, min(start + _BLOCK, count)):
                moment = origin - spacing * i
                created = moment.isoformat()
                lines.append(
                    f"{timed_public_id('msg', now=moment)}\t{domain_id}\t{received if i % 10 == 0 else sent}\t"
                    f"Order {i}\tYour order {i} has shipped.\t\\N\t0\t\t\t\tf\t{created}\t{created}\n"
                )
            copy.write("".join(lines))


def _load(counts: dict[str, int], origin: datetime, *, day_partitions: bool = True) -> float:
    """COPY each domain's history in, then rebuild the indexes and VACUUM ANALYZE; seconds taken.

    Without `day_partitions`, the rows of days with no partition go to the DEFAULT one (PostgreSQL)."""
    from django.db import connection

    from domains.models import Domain

    started = time.perf_counter()
    with connection.cursor() as cursor:
        # Plain indexes (not those behind the primary key and unique constraints), rebuilt below
        # from the definitions PostgreSQL holds, so they come back exactly as migrated.
        cursor.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'messaging_message' AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint WHERE conrelid = 'messaging_message'::regclass)"
        )
        indexes = cursor.fetchall()
        for name, _ in indexes:
            cursor.execute(f'DROP INDEX "{name}"')
    spacing = spacing_for(max(counts.values()))
    if day_partitions:
        partitions_for(origin=origin, span=spacing * max(counts.values()))
    for name, count in counts.items():
        domain = Domain.objects.get(name=name)
        _copy_messages(domain_id=domain.pk, domain_name=name, count=count, origin=origin, spacing=spacing)
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '256MB'")
        for _, definition in indexes:
            # A partitioned table's index is defined ON ONLY the parent (its partitions' indexes attached
            # one by one); built as such it would cover no partition, so it is built on them all.
            cursor.execute(definition.replace(" ON ONLY ", " ON ", 1))
        cursor.execute("VACUUM (ANALYZE) messaging_message")
    return time.perf_counter() - started


def _list_queries(domain, cursor: str | None) -> list[tuple[str, tuple]]:
    """The SQL message_list runs for a page, captured from the selector itself."""
    from django.db import connection

    from messaging.selectors import message_list

    captured = []

    def capture(execute, sql, params, many, context):
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        message_list(domain=domain, direction=None, limit=PAGE_SIZE, after=cursor)
    return [(sql, params) for sql, params in captured if "messaging_message" in sql]


def _explain(domain, cursor: str | None) -> str:
    from django.db import connection

    plans = []
    with connection.cursor() as db:
        for sql, params in _list_queries(domain, cursor):
            db.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
            plans.append("\n".join(row[0] for row in db.fetchall()))
    return "\n\n".join(plans)


def _deep_cursor(domain, position: int) -> str:
    """The cursor a client holds after paging down to `position` (signed like the API's own)."""
    from messaging.models import Message
    from messaging.selectors import _encode_cursor

    last = Message.objects.filter(domain=domain).order_by("-created_at", "-public_id")[position]
    return _encode_cursor(domain=domain, direction=None, last=last)


def _targets(base_url: str, token: str, domain, size: int) -> dict[str, Target]:
    from django.db import connection

    deep = _deep_cursor(domain, size // 2)
    with connection.cursor() as cursor:
        # Ids spread over the whole history, so detail requests are not all cache-hot.
        cursor.execute(
            "SELECT public_id FROM messaging_message WHERE domain_id = %s AND id %% %s = 0 LIMIT 200",
            [domain.pk, max(1, size // 200)],
        )
        ids = [row[0] for row in cursor.fetchall()]
    paths = {
        FIRST_PAGE: [f"/v1/messages?limit={PAGE_SIZE}"],
        HALFWAY: [f"/v1/messages?limit={PAGE_SIZE}&after={deep}"],
        "get by id": [f"/v1/messages/{public_id}" for public_id in ids],
    }
    return {name: make_target(base_url, method="GET", paths=p, token=token) for name, p in paths.items()}


def _execution_ms(plan: str) -> str:
    return re.search(r"Execution Time: (\S+ ms)", plan).group(1)


def _explains(domain, size: int) -> dict[str, str]:
    return {
        "first page": _explain(domain, None),
        f"a page halfway down (after message {size // 2:,})": _explain(domain, _deep_cursor(domain, size // 2)),
    }


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from domains.models import Domain
    from domains.services import domain_create

    if not 0 < args.small < args.large:
        raise BenchError("list: --small must be positive and less than --large")
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    tokens = {
        size: create_key(env, domain=name) for size, name in ((args.small, SMALL_DOMAIN), (args.large, LARGE_DOMAIN))
    }
    domain_create(name=OTHER_DOMAIN, verified=True, actor="bench")
    domains = {args.small: Domain.objects.get(name=SMALL_DOMAIN), args.large: Domain.objects.get(name=LARGE_DOMAIN)}
    counts = {SMALL_DOMAIN: args.small, LARGE_DOMAIN: args.large, OTHER_DOMAIN: (args.small + args.large) // 4}
    load_seconds = _load(counts, datetime.now(UTC))

    results: dict[int, dict[str, LoadResult]] = {size: defaultdict(LoadResult) for size in domains}
    with server(env, workers=args.workers) as base_url:
        targets = {size: _targets(base_url, tokens[size], domain, size) for size, domain in domains.items()}
        for target in (t for by_kind in targets.values() for t in by_kind.values()):
            run_load(target, total=10)  # warm-up
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for size, by_kind in targets.items():
                for kind, target in by_kind.items():
                    results[size][kind].merge(run_load(target, total=per_round))
    small, large = results[args.small], results[args.large]

    sizes = (f"{args.small:,}", f"{args.large:,}")
    section = Section(
        title="3. List scaling",
        summary=(
            f"`GET /v1/messages` (limit {PAGE_SIZE}) and `GET /v1/messages/{{id}}` for a key whose domain holds "
            f"{sizes[0]} messages and for one whose domain holds {sizes[1]}, in the same table (with "
            f"{counts[OTHER_DOMAIN]:,} more in a third domain); {per_round * args.rounds} requests per row and size, "
            f"one at a time, in {args.rounds} interleaved rounds."
        ),
        header=["request", f"p50, {sizes[0]}", f"p99, {sizes[0]}", f"p50, {sizes[1]}", f"p99, {sizes[1]}", "errors"],
    )
    for kind in small:
        s, lg = small[kind], large[kind]
        errors = ", ".join(e for e in (s.describe_errors(), lg.describe_errors()) if e)
        section.rows.append(
            [kind, ms(s.percentile_ms(50)), ms(s.percentile_ms(99)), ms(lg.percentile_ms(50)), ms(lg.percentile_ms(99))]
            + [str(s.errors + lg.errors) + (f" ({errors})" if errors else "")]
        )
        section.failed_requests += s.errors + lg.errors
        ratio = lg.percentile_ms(50) / s.percentile_ms(50)
        # The get's goal since issue 33: a timed public id reads one or two day partitions, whatever the history.
        section.ratios.append(Ratio(f"p50 {sizes[1]} / {sizes[0]}, {kind}", ratio, "<= 1.3", ratio <= 1.3))
    rows = sum(counts.values())
    section.notes.append(
        f"Loading {rows:,} rows took {load_seconds:.1f} s ({rows / load_seconds:,.0f} rows/s): COPY, index rebuild "
        "and VACUUM ANALYZE (which autovacuum would otherwise do a little later)."
    )
    section.plots.append(plots.listing(ctx.output / "list.png", small, large, sizes=sizes))
    for size, domain in domains.items():
        explains = _explains(domain, size)
        executions = ", ".join(f"{page}: {_execution_ms(plan)}" for page, plan in explains.items())
        section.notes.append(f"The list query itself, domain with {size:,} messages, executes in {executions}.")
        for page, plan in explains.items():
            heading = f"EXPLAIN (ANALYZE, BUFFERS) of the list query, {page}, domain with {size:,} messages:"
            section.details.append(f"{heading}\n\n```\n{plan}\n```")
    return [section]


SCENARIO = Scenario(
    name="list",
    help="GET /v1/messages and /v1/messages/{id} latency for a small and a large domain",
    add_arguments=add_arguments,
    tiny={"small": 200, "large": 2000, "requests": 10, "rounds": 2, "workers": 1},
    run=run,
)

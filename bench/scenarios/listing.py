"""Scenario 3, list scaling: GET /v1/messages and /v1/messages/{id} as the key's domain grows.

Messages are loaded with PostgreSQL COPY (text format, written in large blocks), first `--small`
in the key's domain, then topped up to `--large`, each time with a quarter as many again in
another domain. Latency is measured one request at a time (concurrency 1), so it is the cost
of a request, not queueing. The list query's plan is EXPLAINed (ANALYZE, BUFFERS) at both sizes.
"""

import argparse
import secrets
import time
from datetime import UTC, datetime, timedelta

from bench import plots
from bench.load import LoadResult, make_target, run_load
from bench.report import Ratio, Section, ms
from bench.scenario import Context, Scenario
from bench.stack import provision, server, server_env

DOMAIN = "list.bench.example"
OTHER_DOMAIN = "other.bench.example"
PAGE_SIZE = 20
HALFWAY = "list, a page halfway down the cursor chain"
_COLUMNS = (
    'public_id, domain_id, direction, status, from_address, "to", cc, bcc, reply_to, subject, text, html, '
    "attempts, last_error, message_id_header, envelope_from, created_at, updated_at"
)
_BLOCK = 50_000  # rows per COPY write: big enough that Python's per-call cost vanishes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small", type=int, default=10_000, help="messages in the key's domain first (10 000)")
    parser.add_argument("--large", type=int, default=1_000_000, help="then topped up to this many (1 000 000)")
    parser.add_argument("--requests", type=int, default=300, help="requests per endpoint and size (default 300)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")


def _copy_messages(*, domain_id: int, domain_name: str, first: int, count: int, origin: datetime) -> None:
    """Rows first … first+count-1 of a domain's history, row i created i seconds before origin.

    Every tenth is a received message, the rest delivered: a plausible mix for the list."""
    from django.db import connection

    sent = f'sent\tdelivered\tapp@{domain_name}\t["customer@example.org"]\t[]\t[]\t[]'
    received = f'received\treceived\tcustomer@example.org\t["support@{domain_name}"]\t[]\t[]\t[]'
    with connection.cursor() as cursor, cursor.copy(f"COPY messaging_message ({_COLUMNS}) FROM STDIN") as copy:
        for start in range(first, first + count, _BLOCK):
            lines = []
            for i in range(start, min(start + _BLOCK, first + count)):
                created = (origin - timedelta(seconds=i)).isoformat()
                lines.append(
                    f"msg_{secrets.token_hex(12)}\t{domain_id}\t{received if i % 10 == 0 else sent}\t"
                    f"Order {i}\tYour order {i} has shipped.\t\\N\t0\t\t\t\t{created}\t{created}\n"
                )
            copy.write("".join(lines))


def _load(*, total: int, already: int, origin: datetime) -> float:
    """Top the key's domain up to `total` messages (a quarter as many again elsewhere); seconds taken."""
    from django.db import connection

    from domains.models import Domain

    started = time.perf_counter()
    for name, first, count in (
        (DOMAIN, already, total - already),
        (OTHER_DOMAIN, already // 4, total // 4 - already // 4),
    ):
        domain = Domain.objects.get(name=name)
        _copy_messages(domain_id=domain.pk, domain_name=name, first=first, count=count, origin=origin)
    with connection.cursor() as cursor:
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


def _measure(base_url: str, token: str, domain, size: int, requests: int) -> tuple[dict[str, LoadResult], dict]:
    from django.db import connection

    deep = _deep_cursor(domain, size // 2)
    with connection.cursor() as cursor:
        # A sample of ids spread over the whole domain, so detail requests are not all cache-hot.
        cursor.execute(
            "SELECT public_id FROM messaging_message WHERE domain_id = %s AND id %% %s = 0 LIMIT 200",
            [domain.pk, max(1, size // 200)],
        )
        ids = [row[0] for row in cursor.fetchall()]
    paths = {
        "list, first page": [f"/v1/messages?limit={PAGE_SIZE}"],
        HALFWAY: [f"/v1/messages?limit={PAGE_SIZE}&after={deep}"],
        "get by id": [f"/v1/messages/{public_id}" for public_id in ids],
    }
    results = {}
    for name, endpoint_paths in paths.items():
        target = make_target(base_url, method="GET", paths=endpoint_paths, token=token)
        run_load(target, total=20)  # warm-up
        results[name] = run_load(target, total=requests)
    explains = {
        "first page": _explain(domain, None),
        f"a page halfway down (message {size // 2:,})": _explain(domain, deep),
    }
    return results, explains


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from domains.models import Domain
    from domains.services import domain_create

    if not 0 < args.small < args.large:
        raise SystemExit("bench list: --small must be positive and less than --large")
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    token = provision(env, domain=DOMAIN)
    domain_create(name=OTHER_DOMAIN, verified=True, actor="bench")
    domain = Domain.objects.get(name=DOMAIN)
    origin = datetime.now(UTC)

    sizes = (f"{args.small:,}", f"{args.large:,}")
    load_seconds = [_load(total=args.small, already=0, origin=origin)]
    with server(env, workers=args.workers) as base_url:
        small, small_explain = _measure(base_url, token, domain, args.small, args.requests)
    load_seconds.append(_load(total=args.large, already=args.small, origin=origin))
    with server(env, workers=args.workers) as base_url:
        large, large_explain = _measure(base_url, token, domain, args.large, args.requests)

    section = Section(
        title="3. List scaling",
        summary=(
            f"`GET /v1/messages` (limit {PAGE_SIZE}) and `GET /v1/messages/{{id}}` with {sizes[0]} and then "
            f"{sizes[1]} messages in the key's domain (plus a quarter as many in another domain), "
            f"{args.requests} requests each, one at a time."
        ),
        header=["request", f"p50, {sizes[0]}", f"p99, {sizes[0]}", f"p50, {sizes[1]}", f"p99, {sizes[1]}", "errors"],
    )
    for kind in small:
        s, lg = small[kind], large[kind]
        section.rows.append(
            [
                kind,
                ms(s.percentile_ms(50)),
                ms(s.percentile_ms(99)),
                ms(lg.percentile_ms(50)),
                ms(lg.percentile_ms(99)),
                str(s.errors + lg.errors),
            ]
        )
        ratio = lg.percentile_ms(50) / s.percentile_ms(50)
        goal = kind.startswith("list")
        section.ratios.append(
            Ratio(f"p50 {sizes[1]} / {sizes[0]}, {kind}", ratio, "<= 1.3" if goal else "", ratio <= 1.3)
        )
    section.notes.append(
        f"Loading with COPY took {load_seconds[0]:.1f} s for {args.small + args.small // 4:,} rows and "
        f"{load_seconds[1]:.1f} s for the next {args.large + args.large // 4 - args.small - args.small // 4:,} "
        "(including VACUUM ANALYZE, which autovacuum would otherwise do a little later)."
    )
    section.plots.append(plots.listing(ctx.output / "list.png", small, large, sizes=sizes))
    for size, explains in ((sizes[0], small_explain), (sizes[1], large_explain)):
        for page, plan in explains.items():
            section.details.append(
                f"EXPLAIN (ANALYZE, BUFFERS) of the list query, {page}, {size} messages:\n\n```\n{plan}\n```"
            )
    return [section]


SCENARIO = Scenario(
    name="list",
    help="GET /v1/messages and /v1/messages/{id} latency at a small and a large message count",
    add_arguments=add_arguments,
    tiny={"small": 200, "large": 2000, "requests": 20, "workers": 1},
    run=run,
)

"""Scenario 7, retention purge: the API's latency while `manage.py purge_messages` deletes a large history.

One domain holds `--messages` messages (and as many events) past retention, loaded with COPY as in
scenario 3; another holds a small recent history and takes the API load: `GET /v1/messages` and
`POST /v1/send`, each open-loop at `--rate` requests per second (latency counted from the scheduled
start), well below what the server takes, so latency is the cost of a request and not queueing. The
purge runs in its own process, which is stopped (SIGSTOP) and continued (SIGCONT) every 2 seconds
until it is done: the load runs throughout, and each 2-second round counts as unloaded or as during
the purge, so a shared machine's drifting load falls on both alike. The purge's batch query is
EXPLAINed on the full table. On PostgreSQL that history lies in the DEFAULT partition (no day
partition is made for it), which keeps the row purge, as a domain with a shorter retention does.

Then, with the server stopped, the drop of a whole day: `--day-messages` messages (and as many
events) created on one day past retention, in that day's partitions, written by INSERT … SELECT
generate_series; `messages_purge` is timed and the dead tuples of the day partitions left (the
live ones) are read from pg_stat_user_tables before and after.
"""

import argparse
import json
import signal
import subprocess
import sys
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

from bench.load import LoadResult, Target, make_target, run_load
from bench.report import Ratio, Section, ms
from bench.scenario import Context, Scenario
from bench.scenarios.listing import _copy_messages, _load
from bench.stack import ROOT, BenchError, create_key, server, server_env

OLD_DOMAIN = "old.purge.bench.example"
LIVE_DOMAIN = "live.purge.bench.example"
RETENTION_DAYS = 30
GOAL = 1.5
DEFAULT_MESSAGES = 200_000
DAY_DROP_GOAL_SECONDS = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # 200 000, not 1 000 000: at about 1 900 messages/s while it runs (half the time) a million took 14 minutes,
    # a third of `make bench`; bench/results/retention-purge.md has the run at 1 000 000.
    parser.add_argument("--messages", type=int, default=DEFAULT_MESSAGES, help="messages past retention (200 000)")
    parser.add_argument("--recent", type=int, default=10_000, help="recent messages of the API's domain (10 000)")
    parser.add_argument(
        "--day-messages", type=int, default=1_000_000, help="messages of the day dropped whole (1 000 000)"
    )
    parser.add_argument("--rate", type=int, default=5, help="requests per second per endpoint (default 5)")
    parser.add_argument("--seconds", type=int, default=2, help="length of one round, paused or not (default 2)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers (default 2)")


def _add_events(domain_id: int) -> None:
    """One event per message of the domain, written by the database itself."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO messaging_messageevent (message_id, type, recipient, detail, created_at, updated_at) "
            "SELECT id, 'delivered', '', '', created_at, created_at FROM messaging_message WHERE domain_id = %s",
            [domain_id],
        )
        cursor.execute("VACUUM (ANALYZE) messaging_messageevent")


def _explain_batch(domain) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of the query that finds one purge batch."""
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    from messaging.retention import expired_messages

    batch = expired_messages(domain=domain, now=timezone.now()).order_by("created_at")
    query = batch.select_for_update(skip_locked=True).values_list("pk", flat=True)[
        : settings.MAILSERVICE_RETENTION_BATCH_SIZE
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        sql, params = query.query.sql_with_params()
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
        return "\n".join(row[0] for row in cursor.fetchall())


def _dead_tuples_of_day_partitions() -> tuple[int, int]:
    """(n_dead_tup summed over the day partitions of messages and events, how many there are), after
    this backend's statistics are flushed."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT coalesce(sum(n_dead_tup), 0), count(*) FROM pg_stat_user_tables "
            "WHERE relname ~ '^messaging_message(event)?_p[0-9]{8}$'"
        )
        dead, partitions = cursor.fetchone()
    return int(dead), int(partitions)


def _drop_a_day(*, domain_id: int, count: int, days_ago: int) -> dict[str, float | int | str]:
    """Load `count` messages and events on one day `days_ago` days ago, then time the purge that drops it."""
    from django.db import connection
    from django.utils import timezone

    from bench.scenarios.listing import partitions_for
    from messaging.partitioning import history_partitioned
    from messaging.retention import messages_purge

    if not history_partitioned():
        raise BenchError("purge: the day drop needs partitioned history (PostgreSQL)")
    day_start = (timezone.now() - timedelta(days=days_ago)).replace(hour=0, minute=0, second=0, microsecond=0)
    partitions_for(origin=day_start, span=timedelta(0))
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(
            'INSERT INTO messaging_message (public_id, domain_id, direction, status, from_address, "to", cc, bcc, '
            "reply_to, subject, text, attempts, last_error, message_id_header, envelope_from, is_test, created_at, "
            "updated_at) SELECT 'msg_day' || n, %s, 'sent', 'delivered', 'app@example.com', "
            "'[\"customer@example.org\"]', '[]', '[]', '[]', 'Order ' || n, 'Your order has shipped.', 1, '', '', '', "
            "false, %s + make_interval(secs => n * 86399.0 / %s), %s FROM generate_series(1, %s) n",
            [domain_id, day_start, count, day_start, count],
        )
        cursor.execute(
            "INSERT INTO messaging_messageevent (message_id, type, recipient, detail, created_at, updated_at) "
            "SELECT id, 'delivered', '', '', created_at, created_at FROM messaging_message "
            "WHERE created_at >= %s AND created_at < %s",
            [day_start, day_start + timedelta(days=1)],
        )
        cursor.execute("VACUUM (ANALYZE) messaging_message, messaging_messageevent")
    load_seconds = time.perf_counter() - started
    dead_before, live = _dead_tuples_of_day_partitions()
    started = time.perf_counter()
    result = messages_purge()
    drop_seconds = time.perf_counter() - started
    dead_after, live_after = _dead_tuples_of_day_partitions()
    dropped = ", ".join(name for name in result.dropped)
    if result.total < count or not result.dropped:
        raise BenchError(f"purge: the day's drop took {result.total} of {count} messages ({dropped})")
    return {
        "seconds": drop_seconds,
        "load_seconds": load_seconds,
        "dead_before": dead_before,
        "dead_after": dead_after,
        "live_partitions": live_after,
        "dropped": dropped,
    }


def _measure(targets: dict[str, Target], *, rate: int, seconds: float) -> dict[str, LoadResult]:
    """Every target at `rate` per second for `seconds`, all at once."""
    with ThreadPoolExecutor(len(targets)) as pool:
        futures = {
            name: pool.submit(run_load, target, total=max(1, int(rate * seconds)), rate=rate)
            for name, target in targets.items()
        }
        return {name: future.result() for name, future in futures.items()}


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from domains.models import Domain
    from domains.services import domain_create
    from messaging.models import DailyMessageCount, Message
    from tests.harness import child_env

    if min(args.messages, args.recent, args.rate, args.seconds, args.day_messages) < 1:
        raise BenchError("purge: --messages, --recent, --rate, --seconds and --day-messages must be positive")
    env = server_env(
        DATABASE_URL=ctx.services.database_url,
        REDIS_URL=ctx.services.redis_url,
        MAILSERVICE_RETENTION_DAYS=str(RETENTION_DAYS),
    )
    token = create_key(env, domain=LIVE_DOMAIN)
    old = domain_create(name=OLD_DOMAIN, verified=True, actor="bench")
    live = Domain.objects.get(name=LIVE_DOMAIN)
    now = datetime.now(UTC)
    started = time.perf_counter()
    _load({OLD_DOMAIN: args.messages}, now - timedelta(days=RETENTION_DAYS + 10), day_partitions=False)
    _add_events(old.pk)
    _copy_messages(domain_id=live.pk, domain_name=LIVE_DOMAIN, count=args.recent, origin=now)
    load_seconds = time.perf_counter() - started
    plan = _explain_batch(old)

    send = json.dumps({"from": f"app@{LIVE_DOMAIN}", "to": "customer@example.org", "subject": "Hi", "text": "Hello"})
    unloaded: dict[str, LoadResult] = defaultdict(LoadResult)
    loaded: dict[str, LoadResult] = defaultdict(LoadResult)
    with server(env, workers=args.workers) as base_url:
        targets = {
            "GET /v1/messages": make_target(base_url, method="GET", paths=["/v1/messages?limit=20"], token=token),
            "POST /v1/send": make_target(base_url, method="POST", paths=["/v1/send"], token=token, body=send.encode()),
        }
        _measure(targets, rate=args.rate, seconds=1)  # warm-up
        purge_started = time.perf_counter()
        purge = subprocess.Popen(
            [sys.executable, "manage.py", "purge_messages"],
            cwd=ROOT,
            env=child_env(**env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        rounds = 0
        while purge.poll() is None:
            running = rounds % 2 == 0
            purge.send_signal(signal.SIGCONT if running else signal.SIGSTOP)
            # Stopped rounds are half as long: enough samples for a baseline, less time added to the run.
            seconds = args.seconds if running else args.seconds / 2
            for name, result in _measure(targets, rate=args.rate, seconds=seconds).items():
                (loaded if running else unloaded)[name].merge(result)
            rounds += 1
        purge_seconds = time.perf_counter() - purge_started
        output, errors = purge.communicate()
        # One more round with the purge done: a purge that ended in its first round still has a baseline.
        for name, result in _measure(targets, rate=args.rate, seconds=args.seconds).items():
            unloaded[name].merge(result)
    if purge.returncode != 0:
        raise BenchError(f"purge: purge_messages failed:\n{errors[-2000:]}")
    left = Message.objects.filter(domain=old).count()
    counted = sum(DailyMessageCount.objects.filter(domain=old).values_list("count", flat=True))
    if left or counted != args.messages:
        raise BenchError(f"purge: {left} expired messages left, {counted} counted of {args.messages}")
    day = _drop_a_day(domain_id=old.pk, count=args.day_messages, days_ago=RETENTION_DAYS + 5)

    section = Section(
        title="7. Retention purge",
        summary=(
            f"`manage.py purge_messages` deleting {args.messages:,} messages past retention and {args.messages:,} "
            f"events (batches of 500, each its own transaction), while the API serves another domain with "
            f"{args.recent:,} recent messages: `GET /v1/messages` and `POST /v1/send`, each open-loop at "
            f"{args.rate}/s throughout, in rounds alternating between the purge running ({args.seconds} s) and the "
            f"purge stopped (SIGSTOP, {args.seconds / 2:g} s) until it was done ({rounds} rounds); the Procfile's web "
            f"server with {args.workers} workers."
        ),
        header=["request", "p50 unloaded", "p99 unloaded", "p50 during purge", "p99 during purge", "errors"],
    )
    for name in targets:
        before, during = unloaded[name], loaded[name]
        errors_text = ", ".join(e for e in (before.describe_errors(), during.describe_errors()) if e)
        section.rows.append(
            [name, ms(before.percentile_ms(50)), ms(before.percentile_ms(99))]
            + [ms(during.percentile_ms(50)), ms(during.percentile_ms(99))]
            + [str(before.errors + during.errors) + (f" ({errors_text})" if errors_text else "")]
        )
        section.failed_requests += before.errors + during.errors
        ratio = during.percentile_ms(99) / before.percentile_ms(99)
        section.ratios.append(Ratio(f"p99 during purge / unloaded, {name}", ratio, f"<= {GOAL}", ratio <= GOAL))
    seconds = float(day["seconds"])
    section.ratios.append(
        Ratio(
            f"seconds to drop a day of {args.day_messages:,} messages and their events",
            seconds,
            f"< {DAY_DROP_GOAL_SECONDS:g}",
            seconds < DAY_DROP_GOAL_SECONDS,
        )
    )
    section.ratios.append(
        Ratio(
            f"dead tuples the drop left in the {day['live_partitions']} live day partitions",
            float(day["dead_after"]) - float(day["dead_before"]),
            "0",
            day["dead_after"] == day["dead_before"],
        )
    )
    section.notes.append(
        f"The day drop: `messages_purge` took {seconds:.2f} s for {args.day_messages:,} messages and as many events "
        f"of one day past retention (counted into the daily counts by one aggregate, then the partitions dropped: "
        f"{day['dropped']}); the live day partitions held {day['dead_before']} dead tuples before and "
        f"{day['dead_after']} after (pg_stat_user_tables). Loading that day took {float(day['load_seconds']):.1f} s."
    )
    section.notes.append(
        f"The purge ran about {purge_seconds * 2 / 3:.0f} s of {purge_seconds:.0f} (stopped every other round): "
        f"about {args.messages / (purge_seconds * 2 / 3):,.0f} messages/s while running, resting between its batches "
        f"as long as each took (with their "
        f"events, and the daily counts written); its output: {output.strip().splitlines()[-1]!r}."
    )
    if args.messages == DEFAULT_MESSAGES:
        section.notes.append(
            f"{DEFAULT_MESSAGES:,} messages by default since the bench gained scenarios 10 and 11 (it was 1,000,000, "
            "14 minutes of the run): the purge's cost per batch does not depend on the history's size (the batch "
            "query's plan below), and bench/results/retention-purge.md has the run at 1,000,000."
        )
    section.notes.append(
        f"Loading the history took {load_seconds:.1f} s "
        "(COPY, index rebuild, VACUUM ANALYZE, events by INSERT … SELECT)."
    )
    section.details.append(
        f"EXPLAIN (ANALYZE, BUFFERS) of the query that finds one purge batch, full table:\n\n```\n{plan}\n```"
    )
    return [section]


SCENARIO = Scenario(
    name="purge",
    help="API p99 while purge_messages deletes a large history past retention",
    add_arguments=add_arguments,
    tiny={"messages": 2000, "recent": 200, "rate": 5, "seconds": 1, "workers": 1, "day_messages": 2000},
    run=run,
)

"""Scenario 12, batch sending: messages per second through `POST /v1/send/batch` against single sends.

One product server (the Procfile's, on the bench's PostgreSQL and Redis) takes single sends (closed loop at
`--concurrency`) and batches of `--batch-size` one-recipient messages (closed loop at `--batch-clients`), in
alternating rounds so a shared machine's drifting load falls on both alike; then batches of `--large-batch`
messages at `--batch-clients` in flight, for the latency of the largest batch a client is expected to send.
Every message of a 200 is counted, and the stored rows are checked against them afterwards.
"""

import argparse
import json
import os

from bench import plots
from bench.load import LoadResult, make_target, run_load
from bench.report import Ratio, Section, bottleneck_note, ms
from bench.scenario import Context, Scenario
from bench.stack import BenchError, create_key, server, server_env

DOMAIN = "batch.bench.example"
# Issue 32's goals: batch messages/s over single-send messages/s, and p99 of the large batch (ms).
GOAL_SPEEDUP, GOAL_LARGE_P99_MS = 8, 1500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=5000, help="messages per way of sending (default 5000)")
    parser.add_argument("--batch-size", type=int, default=100, help="messages per batch (default 100)")
    parser.add_argument("--concurrency", type=int, default=16, help="single sends in flight (default 16)")
    parser.add_argument("--batch-clients", type=int, default=4, help="batches in flight (default 4)")
    parser.add_argument("--large-batch", type=int, default=500, help="messages in the large batches (default 500)")
    parser.add_argument("--large-batches", type=int, default=40, help="large batches sent (default 40)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds the messages are split over")
    parser.add_argument(
        "--workers", type=int, default=2 * (os.cpu_count() or 1), help="gunicorn workers (default 2 × cores)"
    )


def _item(index: int) -> dict:
    return {
        "from": f"bench@{DOMAIN}",
        "to": f"customer{index}@example.org",
        "subject": "Your receipt",
        "text": "Thanks for your order.",
    }


def _batch(size: int) -> bytes:
    return json.dumps({"messages": [_item(index) for index in range(size)]}).encode()


def _messages_per_second(load: LoadResult, size: int) -> float:
    return load.throughput * size


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from messaging.models import Message

    if min(args.messages, args.batch_size, args.concurrency, args.batch_clients, args.rounds) < 1:
        raise BenchError("batch: every size must be positive")
    if min(args.large_batch, args.large_batches) < 1:
        raise BenchError("batch: --large-batch and --large-batches must be positive")
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    token = create_key(env, domain=DOMAIN)
    single, batched = LoadResult(), LoadResult()
    per_round = max(1, args.messages // args.rounds)
    batches_per_round = max(1, per_round // args.batch_size)
    with server(env, workers=args.workers) as url:
        single_body = json.dumps(_item(0)).encode()
        single_target = make_target(url, method="POST", paths=["/v1/send"], token=token, body=single_body)
        batch_path = "/v1/send/batch"
        batch_target = make_target(url, method="POST", paths=[batch_path], token=token, body=_batch(args.batch_size))
        large_target = make_target(url, method="POST", paths=[batch_path], token=token, body=_batch(args.large_batch))
        warm_singles = run_load(single_target, total=args.workers * 5, concurrency=args.concurrency)
        warm_batches = run_load(batch_target, total=args.batch_clients, concurrency=args.batch_clients)
        for _ in range(args.rounds):
            single.merge(run_load(single_target, total=per_round, concurrency=args.concurrency))
            batched.merge(run_load(batch_target, total=batches_per_round, concurrency=args.batch_clients))
        large = run_load(large_target, total=args.large_batches, concurrency=args.batch_clients)
    accepted = single.ok + batched.ok * args.batch_size + large.ok * args.large_batch
    warmed = warm_singles.ok + warm_batches.ok * args.batch_size
    stored = Message.objects.filter(domain__name=DOMAIN).count()
    if stored != accepted + warmed:
        raise BenchError(f"batch: the server answered 200 for {accepted + warmed} messages but stored {stored}")
    section = Section(
        title="12. Batch sending",
        summary=(
            f"One-recipient messages through `POST /v1/send/batch` ({args.batch_size} a batch, {args.batch_clients} "
            f"batches in flight) against single `POST /v1/send` requests ({args.concurrency} in flight) on the same "
            f"server, {per_round * args.rounds:,} messages each way in {args.rounds} alternating rounds; then "
            f"{args.large_batches} batches of {args.large_batch} at {args.batch_clients} in flight."
        ),
        header=["how", "requests", "requests/s", "messages/s", "p50", "p99", "errors"],
    )
    rows = (
        ("single sends", single, 1),
        (f"batches of {args.batch_size}", batched, args.batch_size),
        (f"batches of {args.large_batch}", large, args.large_batch),
    )
    for name, load, size in rows:
        section.rows.append(
            [
                name,
                f"{load.ok + load.errors:,}",
                f"{load.throughput:.1f}",
                f"{_messages_per_second(load, size):.0f}",
                ms(load.percentile_ms(50)),
                ms(load.percentile_ms(99)),
                str(load.errors) + (f" ({load.describe_errors()})" if load.errors else ""),
            ]
        )
    speedup = _messages_per_second(batched, args.batch_size) / max(single.throughput, 1e-9)
    p99 = large.percentile_ms(99)
    section.ratios += [
        Ratio(
            f"messages/s through batches of {args.batch_size} / through single sends",
            speedup,
            f">= {GOAL_SPEEDUP}",
            speedup >= GOAL_SPEEDUP,
        ),
        Ratio(
            f"p99 of a {args.large_batch}-message batch at {args.batch_clients} clients / {GOAL_LARGE_P99_MS} ms",
            p99 / GOAL_LARGE_P99_MS,
            f"< 1 (p99 under {GOAL_LARGE_P99_MS} ms)",
            p99 < GOAL_LARGE_P99_MS,
        ),
    ]
    section.failed_requests = single.errors + batched.errors + large.errors
    busiest = max(single.client_cpu + batched.client_cpu + large.client_cpu)
    section.notes += [
        f"{stored:,} messages stored by the end, {accepted:,} in the measured loads and {warmed:,} in the "
        f"warm-up: every accepted message, checked. The Procfile's web server with {args.workers} workers; "
        "nothing dispatches them (no Celery worker runs), so this is the accept path alone.",
        bottleneck_note("The busiest load generator process", busiest),
    ]
    rates = {
        "single sends": single.throughput,
        f"batches of {args.batch_size}": _messages_per_second(batched, args.batch_size),
        f"batches of {args.large_batch}": _messages_per_second(large, args.large_batch),
    }
    section.plots.append(plots.rates(ctx.output / "batch.png", rates, title="12. Batch sending: messages per second"))
    return [section]


SCENARIO = Scenario(
    name="batch",
    help="messages per second through POST /v1/send/batch against single sends, and a large batch's p99",
    add_arguments=add_arguments,
    tiny={"messages": 100, "batch_size": 50, "large_batch": 100, "large_batches": 4, "rounds": 1, "workers": 1},
    run=run,
)

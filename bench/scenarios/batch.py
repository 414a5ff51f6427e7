"""Scenario 12, batch sending: messages per second through `POST /v1/send/batch` against single sends.

One product server (the Procfile's, on the bench's PostgreSQL and Redis) takes single sends (closed loop at
`--concurrency`) and batches of `--batch-size` one-recipient messages (closed loop at `--batch-clients`), both
driven by wrk for `--seconds` a round, in alternating rounds so a shared machine's drifting load falls on both
alike; then `--large-batches` batches of `--large-batch` messages at `--batch-clients` in flight, for the
latency of the largest batch a client is expected to send. Those are counted requests from bench/load.py's
generator: its CPU cost does not matter at 4 requests in flight, and its latencies are the plain ones, where
wrk's add samples for the requests a slow response held back. Every message of a 200 is counted, and the
stored rows are checked against them afterwards.
"""

import argparse
import json
import os
from urllib.parse import urlsplit

from bench import plots
from bench.budget import EVERYTHING_ELSE, CpuBudget, pids_of
from bench.load import LoadResult, make_target, run_load, run_wrk
from bench.report import Issue32Goal, Ratio, Section, bottleneck_note, ms
from bench.scenario import Context, Scenario
from bench.stack import BenchError, create_key, server, server_env, serving_pid

DOMAIN = "batch.bench.example"
# Issue 32's goals: batch messages/s over single-send messages/s, and p99 of the large batch (ms).
GOAL_SPEEDUP, GOAL_LARGE_P99_MS = 8, 1500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seconds", type=int, default=4, help="seconds each way of sending runs in each round (default 4)"
    )
    parser.add_argument("--batch-size", type=int, default=100, help="messages per batch (default 100)")
    parser.add_argument("--concurrency", type=int, default=16, help="single sends in flight (default 16)")
    parser.add_argument("--batch-clients", type=int, default=4, help="batches in flight (default 4)")
    parser.add_argument("--large-batch", type=int, default=500, help="messages in the large batches (default 500)")
    parser.add_argument("--large-batches", type=int, default=40, help="large batches sent (default 40)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds of both ways (default 2)")
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

    if min(args.seconds, args.batch_size, args.concurrency, args.batch_clients, args.rounds) < 1:
        raise BenchError("batch: every size must be positive")
    if min(args.large_batch, args.large_batches) < 1:
        raise BenchError("batch: --large-batch and --large-batches must be positive")
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    token = create_key(env, domain=DOMAIN)
    single, batched = LoadResult(), LoadResult()
    with server(env, workers=args.workers) as url:
        single_body = json.dumps(_item(0)).encode()
        single_target = make_target(url, method="POST", paths=["/v1/send"], token=token, body=single_body)
        batch_path = "/v1/send/batch"
        batch_target = make_target(url, method="POST", paths=[batch_path], token=token, body=_batch(args.batch_size))
        large_target = make_target(url, method="POST", paths=[batch_path], token=token, body=_batch(args.large_batch))
        warm_singles = run_load(single_target, total=args.workers * 5, concurrency=args.concurrency)
        warm_batches = run_load(batch_target, total=args.batch_clients, concurrency=args.batch_clients)
        for _ in range(args.rounds):
            single.merge(run_wrk(single_target, seconds=args.seconds, concurrency=args.concurrency))
            batched.merge(run_wrk(batch_target, seconds=args.seconds, concurrency=args.batch_clients))
        large_budget = CpuBudget({"gunicorn": pids_of(serving_pid(urlsplit(url).port or 80))})
        with large_budget.measuring():
            large = run_load(large_target, total=args.large_batches, concurrency=args.batch_clients)
    accepted = single.ok + batched.ok * args.batch_size + large.ok * args.large_batch
    warmed = warm_singles.ok + warm_batches.ok * args.batch_size
    # wrk stops with requests in flight, unanswered to it, which the server may still have stored.
    unanswered = args.rounds * (args.concurrency + args.batch_clients * args.batch_size)
    stored = Message.objects.filter(domain__name=DOMAIN).count()
    if not accepted + warmed <= stored <= accepted + warmed + unanswered:
        raise BenchError(
            f"batch: the server answered 200 for {accepted + warmed} messages (and up to {unanswered} more were in "
            f"flight when wrk stopped) but stored {stored}"
        )
    section = Section(
        title="12. Batch sending",
        summary=(
            f"One-recipient messages through `POST /v1/send/batch` ({args.batch_size} a batch, {args.batch_clients} "
            f"batches in flight) against single `POST /v1/send` requests ({args.concurrency} in flight) on the same "
            f"server, driven by wrk for {args.seconds} s each way in each of {args.rounds} alternating rounds; then "
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
            Issue32Goal.BATCH_SPEEDUP,
        ),
        Ratio(
            f"p99 of a {args.large_batch}-message batch at {args.batch_clients} clients / {GOAL_LARGE_P99_MS} ms",
            p99 / GOAL_LARGE_P99_MS,
            f"< 1 (p99 under {GOAL_LARGE_P99_MS} ms)",
            p99 < GOAL_LARGE_P99_MS,
            Issue32Goal.LARGE_BATCH_P99,
        ),
    ]
    section.failed_requests = single.errors + batched.errors + large.errors
    section.notes += [
        f"{stored:,} messages stored by the end, {accepted:,} answered 200 in the measured loads and {warmed:,} in "
        f"the warm-up, the rest in flight when wrk stopped: every accepted message, checked. The Procfile's web "
        f"server with {args.workers} workers; nothing dispatches them (no Celery worker runs), so this is the "
        "accept path alone.",
        f"wrk used {single.client_cpu_ms:.3f} ms of CPU per single send and {batched.client_cpu_ms:.3f} ms per "
        "batch; " + bottleneck_note("its busiest run", max(single.client_cpu + batched.client_cpu)),
        bottleneck_note("The large batches' asyncio generator", max(large.client_cpu)),
        large_budget.note(what=f"the batches of {args.large_batch}", unit="message", count=large.ok * args.large_batch),
        _large_batch_note(large, large_budget, args),
    ]
    rates = {
        "single sends": single.throughput,
        f"batches of {args.batch_size}": _messages_per_second(batched, args.batch_size),
        f"batches of {args.large_batch}": _messages_per_second(large, args.large_batch),
    }
    section.plots.append(plots.rates(ctx.output / "batch.png", rates, title="12. Batch sending: messages per second"))
    return [section]


def _large_batch_note(large: LoadResult, budget: CpuBudget, args: argparse.Namespace) -> str:
    """What a large batch's latency is made of: with every client's batch in the server at once, each waits for
    about all of their work (Little's law), so the CPU per message of the stack's own processes, spread over
    the machine's cores, sets the latency a quiet machine would give."""
    messages = large.ok * args.large_batch
    if messages <= 0:
        return "No large batch was answered."
    per = budget.per_unit_ms(messages)
    own_ms = sum(value for name, value in per.items() if name != EVERYTHING_ELSE)
    cores = os.cpu_count() or 1
    quiet_s = args.batch_clients * args.large_batch * own_ms / 1000 / cores
    return (
        f"The server, PostgreSQL and Redis spent {own_ms:.2f} ms of CPU per message of the large batches, so the "
        f"{args.batch_clients} batches in flight hold {quiet_s:.2f} s of their work on {cores} cores: about the "
        f"mean latency a machine with nothing else to do would give (here p50 "
        f"{large.percentile_ms(50) / 1000:.2f} s and p99 {large.percentile_ms(99) / 1000:.2f} s, with the "
        f"machine {budget.busy():.0%} busy). The {GOAL_LARGE_P99_MS / 1000:.1f} s goal on p99 is missed when other "
        "work takes the cores, or when that CPU per message grows."
    )


SCENARIO = Scenario(
    name="batch",
    help="messages per second through POST /v1/send/batch against single sends, and a large batch's p99",
    add_arguments=add_arguments,
    tiny={"seconds": 1, "batch_size": 50, "large_batch": 100, "large_batches": 4, "rounds": 1, "workers": 1},
    run=run,
)

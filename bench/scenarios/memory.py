"""Scenario 11, memory: the web and Celery worker processes' resident memory over many sends.

`POST /v1/send` (one recipient) at a fixed concurrency on gunicorn, with Celery workers
dispatching every accepted message to bench.sink (discards) as it comes. Every web process
(gunicorn master and workers) is sampled after 1 %, 10 % and all of the requests (100 000 by
default), every worker process once the workers have delivered as many messages (VmRSS, /proc). A process is flat when
it grew less than FLAT_GROWTH from the 10 % sample to the last: the first 10 % are warm-up
(imports, caches, connection pools filling).
"""

import argparse
import os
import secrets
import time
from contextlib import ExitStack
from urllib.parse import urlsplit

from bench.load import LoadResult, make_target, run_load
from bench.report import Ratio, Section
from bench.scenario import Context, Scenario
from bench.scenarios.dispatch import _forget_queue
from bench.stack import (
    BenchError,
    cpu_seconds,
    create_key,
    discard_sink,
    process_tree,
    rss_mib,
    server,
    server_env,
    serving_pid,
    tree_cpu_seconds,
)

DOMAIN = "memory.bench.example"
FLAT_GROWTH = 0.10
DEFAULT_REQUESTS = 100_000
BODY = b'{"from": "shop@memory.bench.example", "to": "customer@example.org", "subject": "Receipt", "text": "Thanks."}'


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=DEFAULT_REQUESTS, help="sends in all (default 100 000)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument(
        "--web-workers", type=int, default=2 * (os.cpu_count() or 1), help="gunicorn workers (default 2 × cores)"
    )
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=5, help="threads per Celery worker (default 5)")


def _rss(pids: list[int]) -> dict[int, float]:
    return {pid: rss_mib(pid) for pid in pids}


def _wait_delivered(domain, count: int, *, timeout: float) -> None:
    from messaging.models import Message, Status

    deadline = time.monotonic() + timeout
    while (delivered := Message.objects.filter(domain=domain, status=Status.DELIVERED).count()) < count:
        if time.monotonic() > deadline:
            raise BenchError(f"memory: {delivered} of {count} messages delivered after {timeout:.0f} s")
        time.sleep(0.2)


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from domains.models import Domain
    from tests.harness import celery_worker, wait_until

    if min(args.requests, args.concurrency, args.web_workers, args.workers, args.threads) < 1 or args.requests < 100:
        raise BenchError("memory: every size must be positive, and --requests at least 100")
    checkpoints = [args.requests // 100, args.requests // 10, args.requests]
    queue = f"bench-memory-{secrets.token_hex(4)}"
    samples: dict[str, dict[int, float]] = {}  # "web 1,000" -> pid -> MiB
    load, started = LoadResult(), time.monotonic()
    with ExitStack() as stack:
        sink = stack.enter_context(discard_sink())
        env = server_env(
            DATABASE_URL=ctx.services.database_url,
            REDIS_URL=ctx.services.redis_url,
            EMAIL_URL=f"smtp://127.0.0.1:{sink.port}",
            CELERY_TASK_DEFAULT_QUEUE=queue,
        )
        token = create_key(env, domain=DOMAIN)
        domain = Domain.objects.get(name=DOMAIN)
        # Other scenarios' accepted messages are not this one's workers' to send.
        Domain.objects.exclude(pk=domain.pk).update(sending_paused=True)
        url = stack.enter_context(server(env, workers=args.web_workers))
        workers = [
            stack.enter_context(celery_worker(beat=False, threads=args.threads, **env)) for _ in range(args.workers)
        ]
        wait_until(
            lambda: all(" ready." in worker.log_path.read_text() for worker in workers),
            timeout=60,
            message="the Celery workers",
        )
        web_pids = process_tree(serving_pid(urlsplit(url).port or 80))
        worker_pids = [pid for worker in workers for pid in process_tree(worker.pid)]
        target = make_target(url, method="POST", paths=["/v1/send"], token=token, body=BODY)
        cpu_before = {"web": tree_cpu_seconds(web_pids[0]), "workers": sum(map(cpu_seconds, worker_pids))}
        done = 0
        for checkpoint in checkpoints:
            load.merge(run_load(target, total=checkpoint - done, concurrency=args.concurrency))
            done = checkpoint
            samples[f"web {checkpoint:,}"] = _rss(web_pids)
            _wait_delivered(domain, load.ok, timeout=120 + checkpoint / 20)
            samples[f"workers {checkpoint:,}"] = _rss(worker_pids)
        web_cpu = tree_cpu_seconds(web_pids[0]) - cpu_before["web"]
        worker_cpu = sum(map(cpu_seconds, worker_pids)) - cpu_before["workers"]
    seconds = time.monotonic() - started
    _forget_queue(ctx.services.redis_url, queue)
    section = Section(
        title="11. Memory over many sends",
        summary=(
            f"{args.requests:,} `POST /v1/send` (one recipient) at concurrency {args.concurrency} on gunicorn "
            f"(the Procfile's server, {args.web_workers} workers), dispatched as they come by {args.workers} Celery "
            f"worker processes "
            f"({args.threads} threads each) to a discarding SMTP sink; each process's VmRSS (MiB) after "
            + ", ".join(f"{c:,}" for c in checkpoints)
            + " requests (web) or delivered messages (workers)."
        ),
        header=["process", *(f"after {c:,}" for c in checkpoints), f"growth {checkpoints[1]:,} → {checkpoints[2]:,}"],
    )
    worst = 0.0
    for kind, pids in (("web", web_pids), ("workers", worker_pids)):
        for i, pid in enumerate(pids):
            readings = [samples[f"{kind} {c:,}"][pid] for c in checkpoints]
            growth = readings[2] / readings[1] - 1
            worst = max(worst, growth)
            name = (
                ("gunicorn master" if i == 0 else f"gunicorn worker {i}") if kind == "web" else f"Celery worker {i + 1}"
            )
            section.rows.append([name, *(f"{mib:.1f}" for mib in readings), f"{growth:+.1%}"])
    section.ratios.append(
        Ratio(
            f"largest RSS growth, {checkpoints[1]:,} → {checkpoints[2]:,}",
            worst,
            f"< {FLAT_GROWTH:.2f} (flat)",
            worst < FLAT_GROWTH,
        )
    )
    section.failed_requests = load.errors
    # The smallest steady leak per request a web worker (~110 MiB) would show as growth past FLAT_GROWTH.
    leak_kib = FLAT_GROWTH * 110 * 1024 / ((checkpoints[2] - checkpoints[1]) / args.web_workers)
    section.notes += [
        f"Flat: every process grew less than {FLAT_GROWTH:.0%} from the {checkpoints[1]:,} sample to the last "
        f"(the first {checkpoints[1]:,} are warm-up). Verdict: {'flat' if worst < FLAT_GROWTH else '**growing**'}.",
        f"A web worker of ~110 MiB serving 1/{args.web_workers} of the requests and keeping {leak_kib:.2f} KiB per "
        f"request would have grown past {FLAT_GROWTH:.0%} here.",
        f"{load.ok:,} sends accepted in {seconds:.0f} s with the waits for the workers at each sample "
        f"({load.throughput:.0f} requests/s while the load ran); errors: {load.errors}"
        + (f" ({load.describe_errors()})" if load.errors else "")
        + ".",
        f"CPU per message (/proc): {web_cpu * 1000 / max(load.ok, 1):.1f} ms in the web processes, "
        f"{worker_cpu * 1000 / max(load.ok, 1):.1f} ms in the Celery workers (PostgreSQL, Redis and the sink not "
        "counted): what sets this scenario's run time on a 2-core machine.",
    ]
    return [section]


SCENARIO = Scenario(
    name="memory",
    help="web and Celery worker RSS over many POST /v1/send, dispatched to a discarding sink",
    add_arguments=add_arguments,
    tiny={"requests": 100, "concurrency": 4, "web_workers": 1, "workers": 1, "threads": 2},
    run=run,
)

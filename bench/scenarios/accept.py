"""Scenario 1, the accept path: POST /v1/send against the framework ceiling on the same stack.

The ceiling is bench.ceiling_urls: the same gunicorn, middleware (rate limit counter in Redis
included), key authentication and permission, answering a constant. Both are driven closed-loop
at a fixed concurrency with the same bodies, in alternating rounds; then the send path
open-loop at half its peak.
"""

import argparse
import json
import os
from collections import defaultdict
from dataclasses import dataclass

from bench import plots
from bench.load import LoadResult, make_target, run_load
from bench.report import Ratio, Section, ms
from bench.scenario import Context, Scenario
from bench.stack import create_key, server, server_env

DOMAIN = "accept.bench.example"
BODY_CHARACTERS = 100_000


def _bodies(domain: str) -> dict[str, bytes]:
    sender = f"bench@{domain}"
    base = {"from": sender, "subject": "Your receipt", "text": "Thanks for your order."}
    words = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    long_text = (words * (BODY_CHARACTERS // len(words) + 1))[:BODY_CHARACTERS]
    variants = {
        "1 recipient": {**base, "to": "customer@example.org"},
        "50 recipients": {**base, "to": [f"customer{i}@example.org" for i in range(50)]},
        "100 000-char body": {**base, "to": "customer@example.org", "text": long_text},
    }
    return {name: json.dumps(body).encode() for name, body in variants.items()}


@dataclass
class AcceptRun:
    ceiling: dict[str, LoadResult]
    send: dict[str, LoadResult]
    half_peak: LoadResult
    half_peak_rate: float


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--requests", type=int, default=1000, help="requests per measurement (default 1000)")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument("--clients", type=int, default=1, help="load generator processes (default 1)")
    parser.add_argument(
        "--workers", type=int, default=2 * (os.cpu_count() or 1), help="gunicorn workers (default 2 × cores)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds the requests are split over")
    parser.add_argument("--open-seconds", type=int, default=10, help="length of the half-peak open-loop run")


def measure(args: argparse.Namespace, env: dict[str, str], *, domain: str) -> AcceptRun:
    """The ceiling and the send path for every body, in alternating rounds on two servers up
    at once (so a shared machine's drifting load falls on both alike), then the send path
    open-loop at half its peak."""
    token = create_key(env, domain=domain)
    bodies = _bodies(domain)
    ceiling: dict[str, LoadResult] = defaultdict(LoadResult)
    send: dict[str, LoadResult] = defaultdict(LoadResult)
    with (
        server({**env, "DJANGO_SETTINGS_MODULE": "bench.ceiling_settings"}, workers=args.workers) as ceiling_url,
        server(env, workers=args.workers) as send_url,
    ):
        servers = ((ceiling, ceiling_url), (send, send_url))
        targets = {
            name: [make_target(url, method="POST", paths=["/v1/send"], token=token, body=body) for _, url in servers]
            for name, body in bodies.items()
        }
        for pair in targets.values():
            for target in pair:
                run_load(target, total=max(args.workers * 5, args.concurrency), concurrency=args.concurrency)
        per_round = max(1, args.requests // args.rounds)
        for _ in range(args.rounds):
            for name, pair in targets.items():
                for (results, _), target in zip(servers, pair, strict=True):
                    load = run_load(target, total=per_round, concurrency=args.concurrency, processes=args.clients)
                    results[name].merge(load)
        rate = send["1 recipient"].throughput / 2
        half_peak = run_load(
            targets["1 recipient"][1], total=max(1, int(rate * args.open_seconds)), rate=rate, processes=args.clients
        )
    return AcceptRun(ceiling=dict(ceiling), send=dict(send), half_peak=half_peak, half_peak_rate=rate)


def _cells(result: LoadResult) -> list[str]:
    cells = [f"{result.throughput:.0f}", ms(result.percentile_ms(50)), ms(result.percentile_ms(99))]
    return [*cells, str(result.errors) + (f" ({result.describe_errors()})" if result.errors else "")]


def section(run: AcceptRun, args: argparse.Namespace, *, title: str, summary: str, plot: str, ctx: Context) -> Section:
    result = Section(
        title=title,
        summary=summary,
        header=["endpoint", "body", "requests/s", "p50", "p99", "errors"],
    )
    for name in run.send:
        result.rows.append(["ceiling", name, *_cells(run.ceiling[name])])
        result.rows.append(["POST /v1/send", name, *_cells(run.send[name])])
    result.rows.append(
        [
            f"POST /v1/send, open loop at {run.half_peak_rate:.0f}/s (half the peak)",
            "1 recipient",
            *_cells(run.half_peak),
        ]
    )
    for name in run.send:
        ratio = run.send[name].throughput / max(run.ceiling[name].throughput, 1e-9)
        has_goal = name == "1 recipient"
        result.ratios.append(
            Ratio(
                f"send / ceiling throughput, {name}",
                ratio,
                ">= 0.5" if has_goal else "",
                ratio >= 0.5 if has_goal else None,
            )
        )
    p99 = run.half_peak.percentile_ms(99)
    result.ratios.append(Ratio("p99 at half the peak / 50 ms", p99 / 50, "< 1 (p99 under 50 ms)", p99 < 50))
    every = [*run.ceiling.values(), *run.send.values(), run.half_peak]
    result.failed_requests = sum(load.errors for load in every)
    busiest = max(cpu for load in every for cpu in load.client_cpu)
    result.notes += [
        f"{args.requests} requests per closed-loop measurement at concurrency {args.concurrency}, in "
        f"{args.rounds} rounds alternating between the ceiling's server and the product's, "
        f"{args.clients} load generator process(es); gunicorn sync workers: {args.workers}; "
        f"open loop: {args.open_seconds} s at a fixed arrival rate, latency counted from the scheduled start.",
        f"The busiest load generator process used {busiest:.0%} of a core: "
        + (
            "it was not the bottleneck."
            if busiest < 0.8
            else "it may have been the bottleneck; rerun with --clients 2 to check."
        ),
    ]
    result.plots.append(plots.accept(ctx.output / plot, run.ceiling, run.send, title=title))
    return result


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    accepted = measure(args, env, domain=DOMAIN)
    summary = (
        "`POST /v1/send` on gunicorn + PostgreSQL + Redis (rate limit counter), against the framework "
        "ceiling: the same stack answering a constant after authenticating the key."
    )
    return [section(accepted, args, title="1. Accept path", summary=summary, plot="accept.png", ctx=ctx)]


SCENARIO = Scenario(
    name="accept",
    help="POST /v1/send throughput and latency against the framework ceiling",
    add_arguments=add_arguments,
    tiny={"requests": 20, "rounds": 1, "concurrency": 2, "workers": 1, "open_seconds": 1},
    run=run,
)

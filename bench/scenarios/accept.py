"""Scenario 1, the accept path: POST /v1/send against fixed references and two views on the product's stack.

The goals' denominators are the fixed references of bench/reference, which do not move with the product:
R0 (a bare DRF view parsing the JSON body, constant answer) and R1 (R0 plus one message-shaped row
committed in PostgreSQL and one Redis INCR with expiry), a minimal Django project on gunicorn sync workers.
Informational beside them, bench.ceiling_urls on the product's own server stack and middleware answering a
constant: `/v1/bare` with no authentication and `/v1/send` after the real key authentication (what the
product's stack costs over R0). All are driven closed-loop at a fixed concurrency with the same bodies, in
alternating rounds; then the send path open-loop at half its peak. Each measurement also reads its server's
CPU time (gunicorn master and workers, /proc), so each row has a CPU cost per request that the load on the
shared machine does not move much.

Every closed loop, on every target, is driven by wrk (bench.load.run_wrk) for a fixed time, each request on
its own connection (`Connection: close`), as a sync gunicorn worker serves it anyway: the same driver and
the same connection behaviour on both sides of each ratio. The open loop stays on bench/load.py's asyncio
generator (wrk has none). The results say how much CPU the driver used per request, so a saturated driver
shows.
"""

import argparse
import json
import os
from collections import defaultdict
from contextlib import nullcontext
from dataclasses import dataclass
from urllib.parse import urlsplit

from bench import plots
from bench.budget import CpuBudget, goal_note, pids_of
from bench.load import LoadResult, Target, make_target, run_load, run_wrk
from bench.profile import Profile, excerpt, profiling
from bench.report import Issue32Goal, Ratio, Section, bottleneck_note, ms
from bench.scenario import Context, Scenario
from bench.stack import (
    ROOT,
    Services,
    create_key,
    process_tree,
    reference_server,
    server,
    server_env,
    serving_pid,
    tree_cpu_seconds,
)

DOMAIN = "accept.bench.example"
BODY_CHARACTERS = 100_000


def _bodies(domain: str) -> dict[str, bytes]:
    sender = f"bench@{domain}"
    base = {"from": sender, "subject": "Your receipt", "text": "Thanks for your order."}
    words = "Lorem ipsum dolor sit amet, consectetur adipiscing elit. "
    long_text = (words * (BODY_CHARACTERS // len(words) + 1))[:BODY_CHARACTERS]
    variants = {
        ONE_RECIPIENT: {**base, "to": "customer@example.org"},
        "50 recipients": {**base, "to": [f"customer{i}@example.org" for i in range(50)]},
        "100 000-char body": {**base, "to": "customer@example.org", "text": long_text},
    }
    return {name: json.dumps(body).encode() for name, body in variants.items()}


# The targets in the order they alternate, and the names the results file gives them.
R0, R1 = "R0: bare reference", "R1: durable reference"
BARE, AUTHENTICATED = "bare view, product's stack", "authenticated view, product's stack"
SEND = "POST /v1/send"
TARGETS = (R0, R1, BARE, AUTHENTICATED, SEND)
# Issue 32's goals for one recipient: send / R1, send / R0, and p99 at half the peak (ms).
GOAL_R1, GOAL_R0, GOAL_P99_MS = 0.7, 0.25, 50
ONE_RECIPIENT = "1 recipient"


@dataclass
class AcceptRun:
    results: dict[str, dict[str, LoadResult]]  # target -> body -> load
    half_peak: LoadResult
    half_peak_rate: float
    budgets: dict[str, CpuBudget]  # target -> where the machine's CPU went in its one-recipient measurements
    profile: Profile  # the send path's workers, in an extra untimed load


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seconds", type=int, default=1, help="seconds each closed-loop measurement runs in each round (default 1)"
    )
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight (default 16)")
    parser.add_argument(
        "--clients", type=int, default=1, help="wrk threads, and asyncio processes for the open loop (default 1)"
    )
    parser.add_argument(
        "--workers", type=int, default=2 * (os.cpu_count() or 1), help="gunicorn workers (default 2 × cores)"
    )
    parser.add_argument("--rounds", type=int, default=4, help="alternating rounds of every measurement (default 4)")
    parser.add_argument("--open-seconds", type=int, default=10, help="length of the half-peak open-loop run")
    parser.add_argument(
        "--profile-seconds", type=int, default=5, help="py-spy profile of the send path's workers, untimed (0: none)"
    )


def _load(target: Target, pid: int, budget: CpuBudget | None = None, *, open_loop: bool = False, **load) -> LoadResult:
    """run_wrk (run_load for the open loop), with the CPU seconds the server's process tree used meanwhile (and
    the machine's, into `budget`)."""
    before = tree_cpu_seconds(pid)
    with budget.measuring() if budget is not None else nullcontext():
        result = run_load(target, **load) if open_loop else run_wrk(target, **load)
    result.server_cpu = tree_cpu_seconds(pid) - before
    return result


def measure(args: argparse.Namespace, env: dict[str, str], *, domain: str, services: Services) -> AcceptRun:
    """The references, the two views on the product's stack and the send path for every body, in alternating
    rounds on three servers up at once (so a shared machine's drifting load falls on all alike), then the
    send path open-loop at half its peak. The references write to the bench's PostgreSQL and Redis
    (`services`), whatever the product's `env` uses."""
    token = create_key(env, domain=domain)
    bodies = _bodies(domain)
    results: dict[str, dict[str, LoadResult]] = {name: defaultdict(LoadResult) for name in TARGETS}
    with (
        reference_server(services, workers=args.workers) as reference_url,
        server({**env, "DJANGO_SETTINGS_MODULE": "bench.ceiling_settings"}, workers=args.workers) as ceiling_url,
        server(env, workers=args.workers) as send_url,
    ):
        routes = {
            R0: (reference_url, "/r0"),
            R1: (reference_url, "/r1"),
            BARE: (ceiling_url, "/v1/bare"),
            AUTHENTICATED: (ceiling_url, "/v1/send"),
            SEND: (send_url, "/v1/send"),
        }
        pids = {name: serving_pid(urlsplit(url).port or 80) for name, (url, _) in routes.items()}
        budgets = {name: CpuBudget({"gunicorn": pids_of(pid)}) for name, pid in pids.items()}
        targets = {
            body_name: {
                name: make_target(url, method="POST", paths=[path], token=token, body=body)
                for name, (url, path) in routes.items()
            }
            for body_name, body in bodies.items()
        }
        for per_target in targets.values():
            for target in per_target.values():
                run_load(target, total=max(args.workers * 5, args.concurrency), concurrency=args.concurrency)
        for _ in range(args.rounds):
            for body_name, per_target in targets.items():
                for name, target in per_target.items():
                    budget = budgets[name] if body_name == ONE_RECIPIENT else None
                    load = _load(
                        target,
                        pids[name],
                        budget,
                        seconds=args.seconds,
                        concurrency=args.concurrency,
                        threads=args.clients,
                    )
                    results[name][body_name].merge(load)
        rate = results[SEND][ONE_RECIPIENT].throughput / 2
        half_peak = _load(
            targets[ONE_RECIPIENT][SEND],
            pids[SEND],
            open_loop=True,
            total=max(1, int(rate * args.open_seconds)),
            rate=rate,
            processes=args.clients,
        )
        profile = Profile()
        if args.profile_seconds > 0:
            workers = process_tree(pids[SEND])[1:]  # the gunicorn master only forwards signals
            with profiling(workers, seconds=args.profile_seconds, into=profile, workdir=ROOT / "var"):
                run_wrk(  # at the peak, for longer than the profile
                    targets[ONE_RECIPIENT][SEND],
                    seconds=args.profile_seconds + 2,
                    concurrency=args.concurrency,
                    threads=args.clients,
                )
    return AcceptRun(
        results={name: dict(by_body) for name, by_body in results.items()},
        half_peak=half_peak,
        half_peak_rate=rate,
        budgets=budgets,
        profile=profile,
    )


def _cells(result: LoadResult) -> list[str]:
    cells = [f"{result.throughput:.0f}", ms(result.percentile_ms(50)), ms(result.percentile_ms(99))]
    cells += [f"{result.server_cpu_ms:.1f}", f"{result.per_core:.0f}"]
    return [*cells, str(result.errors) + (f" ({result.describe_errors()})" if result.errors else "")]


def _goal_note(run: AcceptRun) -> list[str]:
    """What GOAL_R1 of the durable reference would take, when missed, from the one-recipient measurements' CPU."""
    durable, send = run.results[R1][ONE_RECIPIENT], run.results[SEND][ONE_RECIPIENT]
    goal = GOAL_R1 * durable.throughput
    if send.throughput >= goal or min(send.ok, durable.ok) <= 0:
        return []
    send_per, durable_per = run.budgets[SEND].per_unit_ms(send.ok), run.budgets[R1].per_unit_ms(durable.ok)

    def beyond(*parts: str) -> float:
        return max(0.0, sum(send_per.get(part, 0.0) - durable_per.get(part, 0.0) for part in parts))

    needed = {
        "R1's whole cost (server, framework, the committed row, the counter, load generator, kernel)": sum(
            durable_per.values()
        ),
        "PostgreSQL's beyond it (the message's event stored with it)": beyond("PostgreSQL"),
    }
    note = goal_note(
        goal=f"{GOAL_R1} of R1, the durable reference, one recipient",
        rate=goal,
        unit="request",
        capacity=run.budgets[SEND].cpu_per_second(),
        on="the cores as busy as in this run",
        spent_ms=sum(send_per.values()),
        needed=needed,
        rest="the send's own work in the web server beyond R1's (its server stack and middleware, key "
        "authentication, validation, the answer)",
    )
    return [note]


def _throughput_ratio(
    name: str, send: LoadResult, reference: LoadResult, goal: float | None, issue_goal: Issue32Goal | None = None
) -> Ratio:
    value = send.throughput / max(reference.throughput, 1e-9)
    if goal is None:
        return Ratio(name, value)
    return Ratio(name, value, f">= {goal}", value >= goal, issue_goal)


def _ratios(run: AcceptRun, *, goals: bool) -> list[Ratio]:
    """Throughput against the references (with issue 32's goals when `goals`), p99 at half the peak, and the
    stack's own layers against each other."""
    send = run.results[SEND]
    references = (
        (R1, "R1 (durable reference)", GOAL_R1, Issue32Goal.SEND_R1),
        (R0, "R0 (bare reference)", GOAL_R0, Issue32Goal.SEND_R0),
    )
    ratios = [
        _throughput_ratio(
            f"single send / {label} throughput, {body_name}",
            send[body_name],
            run.results[reference][body_name],
            goal if goals and body_name == ONE_RECIPIENT else None,
            issue_goal,
        )
        for reference, label, goal, issue_goal in references
        for body_name in send
    ]
    p99 = run.half_peak.percentile_ms(99)
    ratios.append(
        Ratio(
            f"p99 of single send at half its peak / {GOAL_P99_MS} ms",
            p99 / GOAL_P99_MS,
            f"< 1 (p99 under {GOAL_P99_MS} ms)" if goals else "",
            p99 < GOAL_P99_MS if goals else None,
            Issue32Goal.SEND_P99_HALF_PEAK if goals else None,
        )
    )
    one = {name: run.results[name][ONE_RECIPIENT] for name in TARGETS}
    return [
        *ratios,
        _throughput_ratio("single send / bare view on the product's stack, 1 recipient", one[SEND], one[BARE], None),
        _throughput_ratio(
            "single send / authenticated view on the product's stack, 1 recipient", one[SEND], one[AUTHENTICATED], None
        ),
        _throughput_ratio("bare view on the product's stack / R0, 1 recipient", one[BARE], one[R0], None),
        Ratio(
            "single send / R0 requests per CPU second, 1 recipient",
            one[SEND].per_core / max(one[R0].per_core, 1e-9),
        ),
    ]


def _notes(run: AcceptRun, args: argparse.Namespace, *, goals: bool) -> list[str]:
    """How the loads were run, where the CPU went, and whether the load generators kept up."""
    closed = [load for name in TARGETS for load in run.results[name].values()]
    wrk_cpu_ms = sum(load.client_cpu_seconds for load in closed) * 1000 / max(sum(load.ok for load in closed), 1)
    busiest = max(cpu for load in closed for cpu in load.client_cpu)
    return [
        f"Each closed-loop measurement ran {args.seconds} s at concurrency {args.concurrency} in each of "
        f"{args.rounds} rounds alternating between R0 and R1 (one server: bench/reference on gunicorn sync "
        f"workers), the two views on the product's stack (one server) and the product's server, driven by wrk "
        f"({args.clients} thread(s), one connection per request on every target); the Procfile's web server "
        f"(gunicorn + uvicorn, Django in 8 threads) for the product's stack; {args.workers} workers each; open "
        f"loop: {args.open_seconds} s at a fixed arrival rate from bench/load.py's asyncio generator (wrk has no "
        "open loop), latency counted from the scheduled start. Closed-loop p50 and p99 are wrk's, which adds "
        "samples for the requests a slow response held back (its coordinated-omission correction).",
        "Server CPU: user + system seconds of the gunicorn master and workers (/proc) over each measurement, per "
        "successful request; requests/s per core is its inverse. The goals are on throughput; the CPU ratio is "
        "the steadier figure on a shared machine, but it leaves out the time PostgreSQL and Redis spend.",
        *(
            run.budgets[name].note(what=f"{name}, one recipient", unit="request", count=count)
            for name in (SEND, R1, R0)
            if (count := run.results[name][ONE_RECIPIENT].ok) > 0
        ),
        *(_goal_note(run) if goals else []),
        f"wrk used {wrk_cpu_ms:.3f} ms of CPU per request over the closed loops, its busiest run {busiest:.0%} of "
        + (
            "a core: it was not the bottleneck."
            if busiest < 0.8 * args.clients
            else "a core: it may have been the bottleneck; rerun with --clients 2 to check."
        ),
        bottleneck_note(
            "The open loop's busiest asyncio generator process",
            max(run.half_peak.client_cpu),
            hint="; rerun with --clients 2 to check.",
        ),
    ]


def section(
    run: AcceptRun, args: argparse.Namespace, *, title: str, summary: str, plot: str, ctx: Context, goals: bool = True
) -> Section:
    """The scenario's results; `goals`: with issue 32's goals, which are set for the production stack."""
    result = Section(
        title=title,
        summary=summary,
        header=["endpoint", "body", "requests/s", "p50", "p99", "server CPU / request (ms)", "requests/s per core"]
        + ["errors"],
    )
    for body_name in run.results[SEND]:
        for name in TARGETS:
            result.rows.append([name, body_name, *_cells(run.results[name][body_name])])
    result.rows.append(
        [
            f"POST /v1/send, open loop at {run.half_peak_rate:.0f}/s (half the peak)",
            ONE_RECIPIENT,
            *_cells(run.half_peak),
        ]
    )
    result.ratios += _ratios(run, goals=goals)
    closed = [load for name in TARGETS for load in run.results[name].values()]
    result.failed_requests = sum(load.errors for load in [*closed, run.half_peak])
    result.notes += _notes(run, args, goals=goals)
    result.plots.append(plots.accept(ctx.output / plot, run.results, title=title))
    if args.profile_seconds > 0:
        result.details.append(excerpt(run.profile, what="POST /v1/send's gunicorn workers, one recipient"))
    return result


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    env = server_env(DATABASE_URL=ctx.services.database_url, REDIS_URL=ctx.services.redis_url)
    accepted = measure(args, env, domain=DOMAIN, services=ctx.services)
    summary = (
        "`POST /v1/send` on gunicorn + PostgreSQL + Redis (rate limit counter), against the fixed references R0 "
        "(bare DRF view) and R1 (R0 + one message-shaped row committed + one Redis INCR) on gunicorn sync workers, "
        "and two views on the product's stack answering a constant (bare, and after authenticating the key)."
    )
    return [section(accepted, args, title="1. Accept path", summary=summary, plot="accept.png", ctx=ctx)]


SCENARIO = Scenario(
    name="accept",
    help="POST /v1/send throughput and latency against the fixed references R0 and R1",
    add_arguments=add_arguments,
    tiny={"seconds": 1, "rounds": 1, "concurrency": 2, "workers": 1, "open_seconds": 1, "profile_seconds": 0},
    run=run,
)

"""Scenarios 8 and 9, delivery control: fairness across domains, and the relay's rate.

8. Fairness: domain A has a backlog of accepted messages (1 000 and 10 000) being drained by the
   Celery workers into a discarding sink; once dispatch has started, domain B sends small rounds
   of messages. B's wait (from its message's row to its `delivered` event) is reported as p50/p99
   per backlog size: it should not grow with A's backlog. Oldest first, B would wait behind the
   whole rest of the backlog.
9. Relay rate: the same workers with MAILSERVICE_RELAY_RATE set, the rate the sink sees against
   the configured one; then a sink that answers `421 4.7.0` to every fifth MAIL FROM for a few
   seconds (and closes the connection): the fleet's effective rate (sampled from the shared
   state, as the console shows it) and the delivered rate over time, and that every message is
   delivered exactly once.
"""

import argparse
import secrets
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from bench import plots
from bench.report import Ratio, Section, ms
from bench.scenario import Context, Scenario
from bench.scenarios.dispatch import _forget_queue
from bench.stack import BenchError, discard_sink, server_env

WORKERS, THREADS = 2, 5  # as scenario 2
ROUNDS, ROUND_SIZE, ROUND_GAP = 5, 10, 0.2  # domain B's sends: 5 rounds of 10, 0.2 s apart


def _queue(domain, count: int, *, subject: str = "Newsletter") -> None:
    """`count` accepted messages of `domain`, due now, then the workers woken as a send's statement wakes them."""
    from django.utils import timezone

    from mailservice.doorbell import wake_dispatchers
    from messaging.models import Direction, Message, Status

    now = timezone.now()
    Message.objects.bulk_create(
        (
            Message(
                domain=domain,
                direction=Direction.SENT,
                status=Status.ACCEPTED,
                from_address=f"shop@{domain.name}",
                to=["customer@example.org"],
                subject=subject,
                text="Hello,\n\nyour order is on its way.\n" * 20,
                next_attempt_at=now,
            )
            for _ in range(count)
        ),
        batch_size=2000,
    )
    wake_dispatchers()


@contextmanager
def _workers(env: dict[str, str], *, beat: bool = False) -> Iterator[None]:
    """The worker processes; with `beat`, the first runs the sweeper every second, as deployed (but faster)."""
    from tests.harness import celery_worker, wait_until

    with ExitStack() as stack:
        started = [
            stack.enter_context(
                celery_worker(beat=beat and n == 0, threads=THREADS, MAILSERVICE_DISPATCH_SWEEP_INTERVAL="1", **env)
            )
            for n in range(WORKERS)
        ]
        wait_until(
            lambda: all("ready." in Path(worker.log_path).read_text() for worker in started),
            timeout=60,
            message="the Celery workers",
        )
        yield


def _delivered(domain) -> int:
    from messaging.models import Message, Status

    return Message.objects.filter(domain=domain, status=Status.DELIVERED).count()


def _wait(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise BenchError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _env(ctx: Context, sink_port: int, queue: str, **extra: str) -> dict[str, str]:
    return server_env(
        DATABASE_URL=ctx.services.database_url,
        REDIS_URL=ctx.services.redis_url,
        EMAIL_URL=f"smtp://127.0.0.1:{sink_port}",
        CELERY_TASK_DEFAULT_QUEUE=queue,
        MAILSERVICE_DISPATCH_SWEEP_GRACE="0",
        MAILSERVICE_DISPATCH_SWEEP_LIMIT="1000000",
        **extra,
    )


def _fresh_state(redis_url: str) -> None:
    """Forget the relay's shared state (rate, connections, holds) and the fair-turn cursor of a previous run."""
    from django.core.cache import cache
    from redis import Redis

    client = Redis.from_url(redis_url)
    client.delete("relay:rate", "relay:connections", "relay:destinations")
    client.close()
    cache.delete("dispatch:fair-cursor")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --- 6. fairness --------------------------------------------------------------------------------


def _fairness_run(ctx: Context, backlog: int, sink_port: int) -> dict[str, float]:
    from django.db.models import F, Max

    from domains.models import Domain
    from domains.services import domain_create
    from messaging.models import EventType, MessageEvent

    tag = secrets.token_hex(3)
    busy = domain_create(name=f"a{tag}.fairness.bench.example", verified=True)
    other = domain_create(name=f"b{tag}.fairness.bench.example", verified=True)
    Domain.objects.exclude(pk__in=(busy.pk, other.pk)).update(sending_paused=True)
    queue = f"bench-fairness-{tag}"
    env = _env(ctx, sink_port, queue)
    _fresh_state(ctx.services.redis_url)
    with _workers(env):
        _queue(busy, backlog)
        started = time.monotonic()
        _wait(lambda: _delivered(busy) > 0, timeout=60, what="dispatch to start")
        for _ in range(ROUNDS):
            _queue(other, ROUND_SIZE, subject="Password reset")
            time.sleep(ROUND_GAP)
        total = ROUNDS * ROUND_SIZE
        _wait(lambda: _delivered(other) == total, timeout=120, what="domain B's messages")
        busy_when_b_done = _delivered(busy)
        _wait(lambda: _delivered(busy) == backlog, timeout=60 + backlog / 20, what="domain A's backlog")
        drained = time.monotonic() - started
    _forget_queue(ctx.services.redis_url, queue)
    delivered = MessageEvent.objects.filter(message__domain=other, type=EventType.DELIVERED)
    waits = [
        (row["at"] - row["created"]).total_seconds()
        for row in delivered.values("message").annotate(at=Max("created_at"), created=F("message__created_at"))
    ]
    return {
        "p50": _percentile(waits, 50),
        "p99": _percentile(waits, 99),
        "mean": statistics.fmean(waits),
        "drained": drained,
        "busy_when_b_done": busy_when_b_done,
    }


def add_fairness_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--small", type=int, default=1_000, help="domain A's smaller backlog (default 1 000)")
    parser.add_argument("--large", type=int, default=10_000, help="domain A's larger backlog (default 10 000)")


def run_fairness(args: argparse.Namespace, ctx: Context) -> list[Section]:
    if min(args.small, args.large) < 1:
        raise BenchError("fairness: --small and --large must be positive")
    with discard_sink() as sink:
        results = {backlog: _fairness_run(ctx, backlog, sink.port) for backlog in (args.small, args.large)}
    section = Section(
        title="8. Fairness across domains",
        summary=(
            f"Domain A's backlog of accepted messages drained by the Celery workers ({WORKERS} processes × "
            f"{THREADS} threads) into a discarding sink; once dispatch has started, domain B sends {ROUNDS} rounds "
            f"of {ROUND_SIZE} messages {ROUND_GAP:.1f} s apart. B's wait: from its message's row to its "
            "`delivered` event."
        ),
        header=["A's backlog", "B's wait p50", "B's wait p99", "A delivered when B was done", "A drained in"],
    )
    for backlog, result in results.items():
        section.rows.append(
            [
                f"{backlog:,}",
                ms(result["p50"] * 1000),
                ms(result["p99"] * 1000),
                f"{result['busy_when_b_done']:,.0f} ({result['busy_when_b_done'] / backlog:.0%})",
                f"{result['drained']:.1f} s",
            ]
        )
    small, large = results[args.small], results[args.large]
    growth = large["p99"] / small["p99"]
    section.ratios.append(
        Ratio(f"B's p99 wait, backlog {args.large:,} / {args.small:,}", growth, "<= 1.5 (flat)", growth <= 1.5)
    )
    rate = args.large / large["drained"]
    section.notes.append(
        f"Oldest first, a message of B sent while A's {args.large:,} were queued would have waited for the rest "
        f"of the backlog: up to about {args.large / rate:.0f} s at the {rate:.0f} messages/s measured here."
    )
    section.plots.append(plots.fairness(ctx.output / "fairness.png", results))
    return [section]


FAIRNESS = Scenario(
    name="fairness",
    help="another domain's wait while one domain has a backlog of 1 000 and of 10 000",
    add_arguments=add_fairness_arguments,
    tiny={"small": 100, "large": 300},
    run=run_fairness,
)


# --- 7. relay rate ------------------------------------------------------------------------------


def _delivery_times(domain) -> list[float]:
    from messaging.models import EventType, MessageEvent

    events = MessageEvent.objects.filter(message__domain=domain, type=EventType.DELIVERED).order_by("created_at")
    return [at.timestamp() for at in events.values_list("created_at", flat=True)]


def _held_rate(ctx: Context, rate: int, seconds: float, *, count: int = 0) -> float:
    """Messages per second the sink took with MAILSERVICE_RELAY_RATE=rate (0: unset, `count` messages),
    in the middle of the run."""
    from domains.models import Domain
    from domains.services import domain_create

    tag = secrets.token_hex(3)
    domain = domain_create(name=f"r{tag}.relay.bench.example", verified=True)
    Domain.objects.exclude(pk=domain.pk).update(sending_paused=True)
    count = count or round(rate * seconds)
    queue = f"bench-relay-{tag}"
    _fresh_state(ctx.services.redis_url)
    with discard_sink() as sink, _workers(_env(ctx, sink.port, queue, MAILSERVICE_RELAY_RATE=str(rate))):
        _queue(domain, count)
        _wait(lambda: _delivered(domain) == count, timeout=30 + 3 * seconds, what=f"{count} messages at {rate}/s")
    _forget_queue(ctx.services.redis_url, queue)
    # The middle of the run: past the first half second (start-up), before the last tenth (the last
    # batches keep fewer threads busy).
    times = _delivery_times(domain)
    steady = [at for at in times[: round(len(times) * 0.9)] if at >= times[0] + 0.5]
    if len(steady) < 2:  # a run too short to have a middle (the smoke test's tiny size): the whole run
        steady = times
    span = steady[-1] - steady[0]
    # Every message in the same instant (a tiny run) has no measurable rate: count it as one second's worth.
    return (len(steady) - 1) / span if span > 0 else float(len(steady))


def _slow_down_run(ctx: Context, args: argparse.Namespace) -> dict:
    from django.conf import settings

    from domains.models import Domain
    from domains.services import domain_create
    from messaging.models import EventType, MessageEvent, Status
    from messaging.outbound.fleet_limits import relay_rate_status

    rate, count, throttle_seconds = args.throttled_rate, args.messages, args.throttle_seconds
    tag = secrets.token_hex(3)
    domain = domain_create(name=f"s{tag}.relay.bench.example", verified=True)
    Domain.objects.exclude(pk=domain.pk).update(sending_paused=True)
    queue = f"bench-relay-{tag}"
    _fresh_state(ctx.services.redis_url)
    # This process reads the fleet's shared state, with the workers' settings.
    settings.MAILSERVICE_RELAY_RATE, settings.MAILSERVICE_RELAY_RATE_STEP = float(rate), args.step
    samples: list[tuple[float, float]] = []
    throttle = ("--throttle-every", "5", "--throttle-seconds", str(throttle_seconds))
    limits = {"MAILSERVICE_RELAY_RATE": str(rate), "MAILSERVICE_RELAY_RATE_STEP": str(args.step)}
    with discard_sink(*throttle) as sink, _workers(_env(ctx, sink.port, queue, **limits), beat=True):
        _queue(domain, count)
        deadline = time.monotonic() + 60 + 3 * count / rate
        while _delivered(domain) < count:
            if time.monotonic() > deadline:
                raise BenchError(f"relay: {_delivered(domain)} of {count} delivered under throttling")
            samples.append((time.time(), relay_rate_status()["effective"] or float(rate)))
            time.sleep(0.1)
    _forget_queue(ctx.services.redis_url, queue)
    settings.MAILSERVICE_RELAY_RATE = None
    times = _delivery_times(domain)
    start = times[0]
    # Deferrals and the put-backs under throttling alike.
    deferred = MessageEvent.objects.filter(
        message__domain=domain, type__in=[EventType.DEFERRED, EventType.HELD]
    ).count()
    lowest = min(effective for _, effective in samples)
    recovered = next((at for at, effective in samples if at > start + throttle_seconds and effective >= rate), None)
    return {
        "samples": [(at - start, effective) for at, effective in samples if at >= start],
        "delivered": [at - start for at in times],
        "lowest": lowest,
        "recovered_after": None if recovered is None else recovered - start - throttle_seconds,
        "deferred": deferred,
        "delivered_once": MessageEvent.objects.filter(message__domain=domain, type=EventType.DELIVERED).count(),
        "statuses": set(domain.messages.values_list("status", flat=True)) == {Status.DELIVERED},
    }


def add_relay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rates", default="50,200", help="MAILSERVICE_RELAY_RATE values to hold (default 50,200)")
    parser.add_argument("--seconds", type=float, default=8, help="seconds of mail at each rate (default 8)")
    parser.add_argument("--throttled-rate", type=int, default=100, help="the rate of the slow-down run (100)")
    parser.add_argument("--throttle-seconds", type=float, default=5, help="how long the sink throttles (5)")
    parser.add_argument("--messages", type=int, default=1_500, help="messages of the slow-down run (1 500)")
    parser.add_argument(
        "--step", type=float, default=10, help="MAILSERVICE_RELAY_RATE_STEP of the slow-down run (default 10)"
    )


def run_relay(args: argparse.Namespace, ctx: Context) -> list[Section]:
    try:
        rates = [int(value) for value in str(args.rates).split(",")]
    except ValueError:
        raise BenchError("relay: --rates must be comma-separated whole numbers") from None
    # What the fleet sends with no limit on this machine now: a limit above it cannot be reached.
    uncapped = _held_rate(ctx, 0, args.seconds, count=round(max(rates) * args.seconds))
    held = {rate: _held_rate(ctx, rate, args.seconds) for rate in rates}
    slow = _slow_down_run(ctx, args)
    section = Section(
        title="9. Relay rate",
        summary=(
            f"The Celery workers ({WORKERS} processes × {THREADS} threads) with MAILSERVICE_RELAY_RATE set, "
            f"{args.seconds:g} s of mail at each rate into a discarding sink, measured from the `delivered` events "
            "past the first half second and before the last tenth; then a sink answering `421 4.7.0` to every "
            "fifth MAIL FROM (and closing "
            f"the connection) for {args.throttle_seconds:g} s, at MAILSERVICE_RELAY_RATE={args.throttled_rate}."
        ),
        header=["MAILSERVICE_RELAY_RATE", "messages/s at the sink", "sink / setting"],
    )
    section.rows.append(["unset (no limit)", f"{uncapped:.1f}", ""])
    for rate, measured in held.items():
        section.rows.append([str(rate), f"{measured:.1f}", f"{measured / rate:.2f}"])
        reachable = min(rate, uncapped)
        section.ratios.append(
            Ratio(
                f"sink rate / min({rate}, the rate without a limit)",
                measured / reachable,
                "0.9–1.1",
                0.9 <= measured / reachable <= 1.1,
            )
        )
    recovered = slow["recovered_after"]
    section.notes += [
        f"Under throttling the fleet's effective rate fell from {args.throttled_rate} to {slow['lowest']:.1f} "
        f"messages/s (halved at most once a second, +{args.step:g} messages/s each second without a slow-down "
        "answer: MAILSERVICE_RELAY_RATE_STEP) and "
        + (
            f"was back at {args.throttled_rate} {recovered:.1f} s after the relay stopped throttling."
            if recovered is not None
            else "had not recovered fully when the last message was delivered."
        ),
        f"{args.messages:,} messages, {slow['delivered_once']:,} `delivered` events (one each: "
        f"{'yes' if slow['delivered_once'] == args.messages and slow['statuses'] else '**no**'}), "
        f"{slow['deferred']:,} put back after a slow-down answer without using an attempt.",
    ]
    section.plots.append(plots.relay(ctx.output / "relay.png", slow, throttle_seconds=args.throttle_seconds))
    return [section]


RELAY = Scenario(
    name="relay",
    help="the fleet at MAILSERVICE_RELAY_RATE, and its slow-down and recovery under a relay answering 421",
    add_arguments=add_relay_arguments,
    tiny={"seconds": 1, "messages": 120, "throttle_seconds": 1, "throttled_rate": 50},
    run=run_relay,
)

"""Scenario: direct delivery (EMAIL_URL=mx://) against relay mode, and isolation from slow destinations.

Messages to `--domains` destination domains, whose `--hosts` mail servers (two equal MX hosts a domain)
are discarding receivers on loopback addresses 127.0.1.x found through a DNS server on loopback
(bench/dns_zone.py), bench/mx_receivers.py serving them all in one process. Real Celery workers
(`--workers` processes of `--threads` dispatch threads) drain three runs of the same messages:
- relay: EMAIL_URL names one discarding sink (bench/sink.py): every message over one relay;
- direct: EMAIL_URL=mx://, each message to its domain's MX hosts;
- direct with tarpits: the same, the first `--tarpits` domains' hosts delaying every reply by
  `--tarpit-seconds` (within MAILSERVICE_SMTP_TIMEOUT, so they do deliver, slowly).
Each run is timed from its first claim to the last `delivered` event of the messages that do not go
to a tarpit domain (sent from a sender domain of their own; the others from a second one).
Goals (issue 30): direct / relay >= 0.8 in messages/s; the non-tarpit messages finish within 1.2
times their time without the tarpits.
- throttling (issue 40): `--throttled` messages to one domain whose MX is Debian's Postfix with anvil's
  limits (1 connection at a time, 4 connections and 6 messages per `--anvil-seconds`), found through a
  DNS server of the run's own: the connections it took per message, and the `deferred` events per
  message (each may publish an `email.delayed`), against the least the limits allow.
"""

import argparse
import os
import secrets
import smtplib
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import dns.exception
import dns.resolver

from bench.budget import CpuBudget, pids_of
from bench.dns_zone import destination
from bench.mx_receivers import host
from bench.profile import Profile, excerpt, profiling
from bench.report import Issue32Goal, Ratio, Section
from bench.scenario import Context, Scenario
from bench.stack import ROOT, BenchError, discard_sink, server_env

SENDER = "Acme Shop <shop@{domain}>"
POLL = 0.2  # the bench's own polling must not take CPU from the workers it times


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=2000, help="messages per run (default 2 000)")
    parser.add_argument("--domains", type=int, default=50, help="destination domains (default 50)")
    parser.add_argument("--hosts", type=int, default=100, help="receiving servers, 127.0.1.x (default 100)")
    parser.add_argument("--tarpits", type=int, default=10, help="destination domains that tarpit (default 10)")
    parser.add_argument("--tarpit-seconds", type=float, default=20.0, help="their delay per reply (default 20)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=5, help="dispatch threads per worker (default 5)")
    parser.add_argument("--throttled", type=int, default=30, help="messages to the throttling Postfix (default 30)")
    parser.add_argument("--anvil-seconds", type=int, default=30, help="its anvil_rate_time_unit (default 30)")
    parser.add_argument(
        "--profile-seconds",
        type=float,
        default=5.0,
        help="py-spy profile of the workers in an extra, untimed direct run (0: none)",
    )


@dataclass
class Run:
    name: str
    messages: int  # the messages timed: those to domains that do not tarpit
    seconds: float
    deferred: int = 0  # tarpit messages still queued when the run was stopped
    # Where the machine's CPU went over the timed interval, and the messages (of every domain) delivered in it.
    cpu: CpuBudget = field(default_factory=lambda: CpuBudget({}))
    sent: int = 0

    @property
    def rate(self) -> float:
        return self.messages / max(self.seconds, 1e-9)


def _tarpit_hosts(args: argparse.Namespace) -> int:
    """Receivers 1 … this one serve only the first `--tarpits` domains (bench/dns_zone.py)."""
    return min(2 * args.tarpits, args.hosts)


def _queue(good, slow, args: argparse.Namespace) -> None:
    """Insert the run's messages, due now: from `good` those to domains that do not tarpit, from `slow`
    the others (each sender domain's unfinished messages are then one cheap indexed read)."""
    from django.utils import timezone

    from messaging.models import Direction, Message, Status

    now = timezone.now()
    tarpits = args.tarpits
    Message.objects.bulk_create(
        Message(
            domain=slow if n % args.domains < tarpits else good,
            direction=Direction.SENT,
            status=Status.ACCEPTED,
            from_address=SENDER.format(domain=(slow if n % args.domains < tarpits else good).name),
            to=[f"user{n}@{destination(n % args.domains)}"],
            subject="Your order has shipped",
            text="Hello,\n\nyour order is on its way.\n" * 20,
            next_attempt_at=now,
        )
        for n in range(args.messages)
    )


def _fresh_fleet_state() -> None:
    """Forget the fleet's relay and destination state in Redis: the connection slots of sessions an
    earlier run's workers left in the tarpits when they were stopped expire only with the lease (300 s),
    and held the cap of those destinations in the next run. Run after run, some then began at the cap
    of 10 of the 50 domains and polled for slots (90,000 polls in one run of 4,000 messages)."""
    from django.conf import settings

    from messaging.outbound.fleet_limits import shared_redis

    if not settings.REDIS_URL:
        return  # the state is in the workers' processes, which end with the run
    client = shared_redis()
    for pattern in ("relay:*", "destination:*"):
        for key in client.scan_iter(match=pattern, count=1000):
            client.delete(key)


def _timed(
    name: str,
    env: dict[str, str],
    args: argparse.Namespace,
    *,
    receiving: list[int],
    tarpits: bool,
    timeout: float,
    profile: Profile | None = None,
) -> Run:
    """One run: queue the messages, wake the workers, time until every non-tarpit message is delivered;
    `receiving` are the pids of the receiving side (the relay, or the MX receivers and the DNS server).
    With `profile`, py-spy samples the workers from the wake-up on (the run's figures are then not reported)."""
    from django.db.models import Max

    from domains.models import Domain
    from domains.services import domain_create
    from mailservice.doorbell import wake_dispatchers
    from messaging.models import EventType, Message, MessageEvent, Status
    from tests.harness import celery_worker, wait_until

    _fresh_fleet_state()
    tag = secrets.token_hex(3)
    good = domain_create(name=f"{name}.{tag}.sender.bench.example", verified=True)
    slow = domain_create(name=f"{name}-tarpits.{tag}.sender.bench.example", verified=True)
    Domain.objects.exclude(pk__in=(good.pk, slow.pk)).update(sending_paused=True)  # earlier runs' leftovers wait
    with ExitStack() as stack:
        # One beat (the sweeper): messages deferred or put back for a slow destination are retried.
        workers = [
            stack.enter_context(celery_worker(beat=number == 0, threads=args.threads, **env))
            for number in range(args.workers)
        ]
        wait_until(
            lambda: all("ready." in Path(worker.log_path).read_text() for worker in workers),
            timeout=60,
            message="the Celery workers",
        )
        _queue(good, slow, args)
        budget = CpuBudget(
            {"Celery workers": pids_of(*(worker.pid for worker in workers)), "receiving side": pids_of(*receiving)}
        )
        sampling = (
            profiling(
                [worker.pid for worker in workers], seconds=args.profile_seconds, into=profile, workdir=ROOT / "var"
            )
            if profile is not None
            else nullcontext()
        )
        with budget.measuring(), sampling:
            wake_dispatchers()
            while not Message.objects.filter(domain__in=(good, slow), attempts__gt=0).exists():
                time.sleep(POLL)
            started = datetime.now(UTC)
            deadline = time.monotonic() + timeout
            unfinished = Message.objects.filter(domain=good, status=Status.ACCEPTED)
            while unfinished.exists():
                if time.monotonic() > deadline:
                    raise BenchError(
                        f"isolation: {name}: {unfinished.count()} messages not delivered in {timeout:.0f} s"
                    )
                time.sleep(POLL)
        sent = Message.objects.filter(domain__in=(good, slow), status=Status.DELIVERED).count()
        timed = Message.objects.filter(domain=good)
        if (delivered := timed.filter(status=Status.DELIVERED).count()) < timed.count():
            raise BenchError(f"isolation: {name}: {timed.count() - delivered} messages not delivered")
        finished = MessageEvent.objects.filter(message__domain=good, type=EventType.DELIVERED).aggregate(
            last=Max("created_at")
        )["last"]
        deferred = Message.objects.filter(domain=slow, status=Status.ACCEPTED).count() if tarpits else 0
        Domain.objects.filter(pk=slow.pk).update(sending_paused=True)  # the tarpits' rest is not waited for
    return Run(name, delivered, (finished - started).total_seconds(), deferred, cpu=budget, sent=sent)


ANVIL_MESSAGES, ANVIL_CONNECTIONS = 6, 4  # per --anvil-seconds, one connection at a time


@dataclass
class Throttled:
    messages: int
    seconds: float
    connections: int
    deferred: int  # `deferred` events: what may publish email.delayed

    @property
    def least_connections(self) -> int:
        return -(-self.messages // ANVIL_MESSAGES)


def _throttling(env: dict[str, str], args: argparse.Namespace) -> Throttled:
    """Direct delivery to a Postfix MX with anvil's limits; its connections and deferrals per message."""
    from domains.services import domain_create
    from mailservice.doorbell import wake_dispatchers
    from messaging.models import Direction, EventType, Message, MessageEvent, Status
    from tests.dns_server import dns_server
    from tests.harness import celery_worker, free_port, running, wait_until
    from tests.harness.postfix import ClientLimits, PostfixServer

    _fresh_fleet_state()
    limits = ClientLimits(
        messages=ANVIL_MESSAGES, connections=1, connection_rate=ANVIL_CONNECTIONS, time_unit=args.anvil_seconds
    )
    name, port = f"throttling.{secrets.token_hex(3)}.bench.example", free_port()
    sender = domain_create(name=f"throttling-{secrets.token_hex(3)}.sender.bench.example", verified=True)
    with ExitStack() as stack:
        zone, resolver = stack.enter_context(dns_server())
        zone.publish_mx(name, f"mx.{name}")
        zone.publish_address(f"mx.{name}", "127.0.2.1")
        sink = stack.enter_context(discard_sink())
        postfix = PostfixServer(
            host="127.0.2.1", port=port, next_hop=f"127.0.0.1:{sink.port}", domains=(name,), limits=limits
        )
        server = stack.enter_context(running(postfix))
        before = server.connections()  # its readiness probe's
        worker_env = env | {
            "MAILSERVICE_DNS_RESOLVER": resolver,
            "MAILSERVICE_MX_PORT": str(port),
            # The spacing scaled with the window, as tests/messaging/test_connection_discipline.py does.
            "MAILSERVICE_MX_SPACING_BASE": str(args.anvil_seconds / 30),
        }
        worker = stack.enter_context(celery_worker(threads=args.threads, **worker_env))
        worker.wait_ready()
        Message.objects.bulk_create(
            Message(
                domain=sender,
                direction=Direction.SENT,
                status=Status.ACCEPTED,
                from_address=SENDER.format(domain=sender.name),
                to=[f"user{n}@{name}"],
                subject="Your order has shipped",
                text="Hello",
                next_attempt_at=datetime.now(UTC),
            )
            for n in range(args.throttled)
        )
        started = time.monotonic()
        wake_dispatchers()
        unfinished = Message.objects.filter(domain=sender).exclude(status=Status.DELIVERED)
        least = (args.throttled // ANVIL_MESSAGES) * args.anvil_seconds
        wait_until(lambda: not unfinished.exists(), timeout=4 * least + 60, interval=POLL, message="throttled mail")
        seconds = time.monotonic() - started
        connections = server.connections() - before
    deferred = MessageEvent.objects.filter(message__domain=sender, type=EventType.DEFERRED).count()
    return Throttled(args.throttled, seconds, connections, deferred)


def _answers(address: str, port: int) -> bool:
    try:
        with smtplib.SMTP(address, port, timeout=1) as smtp:
            return smtp.noop()[0] == 250
    except (OSError, smtplib.SMTPException):
        return False


@contextmanager
def _receivers(args: argparse.Namespace, *, port: int, tarpits: int) -> Iterator[int]:
    """bench/mx_receivers.py in a process of its own, ready once its last (never a tarpit) receiver answers."""
    from tests.harness import LOG_DIR, ChildProcess, child_env

    command = [sys.executable, "-m", "bench.mx_receivers", "--port", str(port), "--hosts", str(args.hosts)]
    command += ["--tarpits", str(tarpits), "--tarpit-seconds", str(args.tarpit_seconds)]
    ready = partial(_answers, host(args.hosts), port)
    log = LOG_DIR / f"mx-receivers-{port}.log"
    with ChildProcess(command, name="mx-receivers", env=child_env(), ready=ready, log_path=log) as receivers:
        yield receivers.pid


def _resolves(port: int) -> bool:
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers, resolver.port, resolver.lifetime = ["127.0.0.1"], port, 1.0
    try:
        resolver.resolve(destination(0), "MX", search=False)
    except dns.exception.DNSException:
        return False
    return True


@contextmanager
def _dns(args: argparse.Namespace, *, port: int) -> Iterator[int]:
    """bench/dns_zone.py in a process of its own, ready once it answers."""
    from tests.harness import LOG_DIR, ChildProcess, child_env

    command = [sys.executable, "-m", "bench.dns_zone", "--port", str(port)]
    command += ["--domains", str(args.domains), "--hosts", str(args.hosts)]
    log = LOG_DIR / f"dns-zone-{port}.log"
    with ChildProcess(command, name="dns-zone", env=child_env(), ready=partial(_resolves, port), log_path=log) as dns:
        yield dns.pid


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from tests.harness import free_port

    if not 0 <= args.tarpits < args.domains or args.hosts <= _tarpit_hosts(args) or args.messages < args.domains:
        raise BenchError("isolation: needs 0 <= --tarpits < --domains <= --messages and --hosts > 2 * --tarpits")
    queue = f"bench-isolation-{secrets.token_hex(4)}"
    common = dict(
        DATABASE_URL=ctx.services.database_url,
        REDIS_URL=ctx.services.redis_url,
        CELERY_TASK_DEFAULT_QUEUE=queue,
        MAILSERVICE_SMTP_TIMEOUT=str(max(30.0, 1.5 * args.tarpit_seconds)),  # the tarpits do deliver
        # A deferred message (a DNS lookup that timed out on a busy machine) comes back within seconds.
        MAILSERVICE_DISPATCH_SWEEP_INTERVAL="1",
        MAILSERVICE_DISPATCH_BACKOFF_BASE="0.5",
        MAILSERVICE_DISPATCH_BACKOFF_MAX="4",
    )
    timeout = 120 + args.messages / 5
    port, dns_port = free_port(), free_port()
    with _dns(args, port=dns_port) as dns_pid:
        direct = server_env(
            **common,
            EMAIL_URL="mx://",
            MAILSERVICE_DNS_RESOLVER=f"127.0.0.1:{dns_port}",
            MAILSERVICE_MX_PORT=str(port),
            MAILSERVICE_MX_ALLOW_PRIVATE="true",
        )
        with discard_sink() as sink:
            relay_env = server_env(**common, EMAIL_URL=f"smtp://127.0.0.1:{sink.port}")
            relay = _timed("relay", relay_env, args, receiving=[sink.pid], tarpits=False, timeout=timeout)
        with _receivers(args, port=port, tarpits=0) as receivers_pid:
            receiving = [receivers_pid, dns_pid]
            clean = _timed("direct", direct, args, receiving=receiving, tarpits=False, timeout=timeout)
        with _receivers(args, port=port, tarpits=_tarpit_hosts(args)) as receivers_pid:
            receiving = [receivers_pid, dns_pid]
            slowed = _timed("tarpits", direct, args, receiving=receiving, tarpits=True, timeout=timeout)
        throttled = _throttling(direct, args)
        profile = Profile()
        if args.profile_seconds > 0:
            with _receivers(args, port=port, tarpits=0) as receivers_pid:
                receiving = [receivers_pid, dns_pid]
                _timed("direct", direct, args, receiving=receiving, tarpits=False, timeout=timeout, profile=profile)
    section = Section(
        title="Isolation: direct delivery and slow destinations",
        summary=(
            f"{args.messages:,} messages a run to {args.domains} domains over {args.hosts} receivers on 127.0.1.x "
            f"(DNS on loopback, its own process), {args.workers} worker processes of {args.threads} dispatch threads; "
            "in the last run "
            f"{args.tarpits} domains delay every reply {args.tarpit_seconds:g} s. Timed: the messages to the other "
            f"{args.domains - args.tarpits} domains, from the first claim to their last `delivered` event."
        ),
        header=["run", "messages timed", "seconds", "messages/s", "tarpit messages still queued at the end"],
    )
    for result in (relay, clean, slowed):
        section.rows.append(
            [result.name, f"{result.messages:,}", f"{result.seconds:.1f}", f"{result.rate:.0f}", str(result.deferred)]
        )
    throttling = Section(
        title="Direct delivery to a throttling receiver",
        summary=(
            f"{throttled.messages} messages to one domain whose MX is Debian's Postfix with anvil's limits: one "
            f"connection at a time, {ANVIL_CONNECTIONS} connections and {ANVIL_MESSAGES} messages per "
            f"{args.anvil_seconds} s; the same worker settings. The least the limits allow: "
            f"{throttled.least_connections} connections and "
            f"{(throttled.messages // ANVIL_MESSAGES - 1) * args.anvil_seconds} s."
        ),
        header=["messages", "seconds", "connections", "connections per message", "deferred events per message"],
        rows=[
            [
                str(throttled.messages),
                f"{throttled.seconds:.1f}",
                str(throttled.connections),
                f"{throttled.connections / throttled.messages:.2f}",
                f"{throttled.deferred / throttled.messages:.2f}",
            ]
        ],
    )
    connections_ratio = throttled.connections / throttled.least_connections
    delayed = throttled.deferred / throttled.messages
    throttling.ratios += [
        Ratio("connections / the least the limits allow", connections_ratio, "<= 2", connections_ratio <= 2),
        Ratio("deferred events (email.delayed at most) per message", delayed, "<= 2", delayed <= 2),
    ]
    # The same messages (the non-tarpit ones) are timed in the direct and the tarpit runs.
    to_relay, slowdown = clean.rate / relay.rate, slowed.seconds / clean.seconds
    section.ratios += [
        Ratio("direct / relay (messages/s, no tarpits)", to_relay, ">= 0.8", to_relay >= 0.8, Issue32Goal.DIRECT_RELAY),
        Ratio("non-tarpit messages' time, with / without tarpits", slowdown, "<= 1.2", slowdown <= 1.2),
    ]
    section.notes += [
        relay.cpu.note(what="relay run", unit="message", count=relay.sent),
        clean.cpu.note(what="direct run", unit="message", count=clean.sent),
        "Receiving side: the relay sink in the relay run; the MX receivers' process and the DNS server in the direct "
        "run (their work is the internet's, not the product's, but it shares the cores here).",
    ]
    if to_relay < 0.8:
        section.notes.append(_direct_goal_note(relay, clean, threads=args.workers * args.threads))
    if args.profile_seconds > 0:
        section.details.append(excerpt(profile, what="the Celery workers in direct mode (no tarpits)"))
    return [section, throttling]


def _direct_goal_note(relay: Run, direct: Run, *, threads: int) -> str:
    """What direct / relay >= 0.8 would take, from the two runs' CPU per message, part by part."""
    wanted = 0.8 * relay.rate
    relay_ms, direct_ms = relay.cpu.per_unit_ms(relay.sent), direct.cpu.per_unit_ms(direct.sent)
    growth = {part: ms - relay_ms.get(part, 0.0) for part, ms in direct_ms.items()}
    cores = os.cpu_count() or 1
    allowed = cores * 1000 / wanted  # every core busy
    spent = sum(direct_ms.values())
    by_part = ", ".join(f"{part} {ms:.2f} ms ({growth[part]:+.2f})" for part, ms in direct_ms.items())
    head = (
        f"What the goal (0.8 of relay mode) would take: {wanted:,.0f} messages/s; with all {cores} cores busy that "
        f"allows {allowed:.2f} ms of CPU per message, and the direct run spent {spent:.2f} ms "
        f"(relay mode {sum(relay_ms.values()):.2f} ms). By part, against relay mode: {by_part}."
    )
    if spent > allowed:
        most = max(growth, key=lambda part: growth[part])
        return (
            f"{head} The work itself is over the budget: it would have to shrink by {1 - allowed / spent:.0%}; "
            f"it grew most in {most} (+{growth[most]:.2f} ms a message)."
        )
    return (
        f"{head} The work fits the budget, yet the cores were {direct.cpu.busy():.0%} busy: the rate was held back "
        f"by waiting (DNS answers, a session per destination host, {threads} dispatch threads in all), not by work."
    )


SCENARIO = Scenario(
    name="isolation",
    help="direct delivery (mx://) against a relay, and 40 destinations' time beside 10 tarpits",
    add_arguments=add_arguments,
    tiny={
        "messages": 60,
        "domains": 6,
        "hosts": 12,
        "tarpits": 1,
        "tarpit_seconds": 1,
        "workers": 1,
        "threads": 2,
        "profile_seconds": 0,
        "throttled": 12,
        "anvil_seconds": 2,
    },
    run=run,
)

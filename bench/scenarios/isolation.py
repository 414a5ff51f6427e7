"""Scenario: direct delivery (EMAIL_URL=mx://) against relay mode, and isolation from slow destinations.

Messages to `--domains` destination domains, whose `--hosts` mail servers (two equal MX hosts a domain)
are discarding receivers on loopback addresses 127.0.1.x found through a DNS server on loopback
(tests/dns_server.py), bench/mx_receivers.py serving them all in one process. Real Celery workers
(`--workers` processes of `--threads` dispatch threads) drain three runs of the same messages:
- relay: EMAIL_URL names one discarding sink (bench/sink.py): every message over one relay;
- direct: EMAIL_URL=mx://, each message to its domain's MX hosts;
- direct with tarpits: the same, the first `--tarpits` domains' hosts delaying every reply by
  `--tarpit-seconds` (within MAILSERVICE_SMTP_TIMEOUT, so they do deliver, slowly).
Each run is timed from its first claim to the last `delivered` event of the messages that do not go
to a tarpit domain. Goals (issue 30): direct / relay >= 0.8 in messages/s; the non-tarpit messages
finish within 1.2 times their time without the tarpits.
"""

import argparse
import secrets
import smtplib
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from bench.mx_receivers import host
from bench.report import Ratio, Section
from bench.scenario import Context, Scenario
from bench.stack import BenchError, discard_sink, server_env

SENDER = "Acme Shop <shop@{domain}>"
POLL = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=2000, help="messages per run (default 2 000)")
    parser.add_argument("--domains", type=int, default=50, help="destination domains (default 50)")
    parser.add_argument("--hosts", type=int, default=100, help="receiving servers, 127.0.1.x (default 100)")
    parser.add_argument("--tarpits", type=int, default=10, help="destination domains that tarpit (default 10)")
    parser.add_argument("--tarpit-seconds", type=float, default=20.0, help="their delay per reply (default 20)")
    parser.add_argument("--workers", type=int, default=2, help="Celery worker processes (default 2)")
    parser.add_argument("--threads", type=int, default=5, help="dispatch threads per worker (default 5)")


@dataclass
class Run:
    name: str
    messages: int  # the messages timed: those to domains that do not tarpit
    seconds: float
    deferred: int = 0  # tarpit messages still queued when the run was stopped

    @property
    def rate(self) -> float:
        return self.messages / max(self.seconds, 1e-9)


def destination(number: int) -> str:
    return f"d{number}.isolation.bench.example"


def _publish(zone, args: argparse.Namespace) -> None:
    """Each domain's two MX hosts of equal preference, round robin over the receivers."""
    for number in range(args.domains):
        for which in (0, 1):
            name = f"mx{which}.{destination(number)}"
            zone.publish_mx(destination(number), name, 10)
            zone.publish_address(name, host(1 + (2 * number + which) % args.hosts))


def _tarpit_hosts(args: argparse.Namespace) -> int:
    """Receivers 1 … this one serve only the first `--tarpits` domains (see `_publish`)."""
    return min(2 * args.tarpits, args.hosts)


def _queue(domain, args: argparse.Namespace) -> tuple[list[int], list[int]]:
    """Insert the run's messages, due now; (ids to non-tarpit domains, ids to tarpit domains)."""
    from django.utils import timezone

    from messaging.models import Direction, Message, Status

    now = timezone.now()
    rows = Message.objects.bulk_create(
        Message(
            domain=domain,
            direction=Direction.SENT,
            status=Status.ACCEPTED,
            from_address=SENDER.format(domain=domain.name),
            to=[f"user{n}@{destination(n % args.domains)}"],
            subject="Your order has shipped",
            text="Hello,\n\nyour order is on its way.\n" * 20,
            next_attempt_at=now,
        )
        for n in range(args.messages)
    )
    slow = {destination(number) for number in range(args.tarpits)}
    good = [row.pk for row in rows if row.to[0].partition("@")[2] not in slow]
    return good, [row.pk for row in rows if row.pk not in set(good)]


def _timed(name: str, env: dict[str, str], args: argparse.Namespace, *, tarpits: bool, timeout: float) -> Run:
    """One run: queue the messages, wake the workers, time until every non-tarpit message is delivered."""
    from django.db.models import Max

    from domains.models import Domain
    from domains.services import domain_create
    from mailservice.doorbell import wake_dispatchers
    from messaging.models import EventType, Message, MessageEvent, Status
    from tests.harness import celery_worker, wait_until

    domain = domain_create(name=f"{name}.{secrets.token_hex(3)}.sender.bench.example", verified=True)
    Domain.objects.exclude(pk=domain.pk).update(sending_paused=True)  # earlier runs' leftovers wait
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
        good, slow = _queue(domain, args)
        wake_dispatchers()
        while not Message.objects.filter(domain=domain, attempts__gt=0).exists():
            time.sleep(POLL)
        started = datetime.now(UTC)
        deadline = time.monotonic() + timeout
        while Message.objects.filter(pk__in=good).exclude(status=Status.DELIVERED).exists():
            if time.monotonic() > deadline:
                left = Message.objects.filter(pk__in=good).exclude(status=Status.DELIVERED).count()
                raise BenchError(f"isolation: {name}: {left} of {len(good)} messages not delivered in {timeout:.0f} s")
            time.sleep(POLL)
        finished = MessageEvent.objects.filter(message_id__in=good, type=EventType.DELIVERED).aggregate(
            last=Max("created_at")
        )["last"]
        deferred = Message.objects.filter(pk__in=slow, status=Status.ACCEPTED).count() if tarpits else 0
        Domain.objects.filter(pk=domain.pk).update(sending_paused=True)  # the tarpits' rest is not waited for
    return Run(name, len(good), (finished - started).total_seconds(), deferred)


def _answers(address: str, port: int) -> bool:
    try:
        with smtplib.SMTP(address, port, timeout=1) as smtp:
            return smtp.noop()[0] == 250
    except (OSError, smtplib.SMTPException):
        return False


@contextmanager
def _receivers(args: argparse.Namespace, *, port: int, tarpits: int) -> Iterator[None]:
    """bench/mx_receivers.py in a process of its own, ready once its last (never a tarpit) receiver answers."""
    from tests.harness import LOG_DIR, ChildProcess, child_env

    command = [sys.executable, "-m", "bench.mx_receivers", "--port", str(port), "--hosts", str(args.hosts)]
    command += ["--tarpits", str(tarpits), "--tarpit-seconds", str(args.tarpit_seconds)]
    ready = partial(_answers, host(args.hosts), port)
    log = LOG_DIR / f"mx-receivers-{port}.log"
    with ChildProcess(command, name="mx-receivers", env=child_env(), ready=ready, log_path=log):
        yield


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from tests.dns_server import dns_server
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
    port = free_port()
    with dns_server() as (zone, resolver):
        _publish(zone, args)
        direct = server_env(
            **common,
            EMAIL_URL="mx://",
            MAILSERVICE_DNS_RESOLVER=resolver,
            MAILSERVICE_MX_PORT=str(port),
            MAILSERVICE_MX_ALLOW_PRIVATE="true",
        )
        with discard_sink() as sink:
            relay = _timed(
                "relay",
                server_env(**common, EMAIL_URL=f"smtp://127.0.0.1:{sink.port}"),
                args,
                tarpits=False,
                timeout=timeout,
            )
        with _receivers(args, port=port, tarpits=0):
            clean = _timed("direct", direct, args, tarpits=False, timeout=timeout)
        with _receivers(args, port=port, tarpits=_tarpit_hosts(args)):
            slowed = _timed("tarpits", direct, args, tarpits=True, timeout=timeout)
    section = Section(
        title="Isolation: direct delivery and slow destinations",
        summary=(
            f"{args.messages:,} messages a run to {args.domains} domains over {args.hosts} receivers on 127.0.1.x "
            f"(DNS on loopback), {args.workers} worker processes of {args.threads} dispatch threads; in the last run "
            f"{args.tarpits} domains delay every reply {args.tarpit_seconds:g} s. Timed: the messages to the other "
            f"{args.domains - args.tarpits} domains, from the first claim to their last `delivered` event."
        ),
        header=["run", "messages timed", "seconds", "messages/s", "tarpit messages still queued at the end"],
    )
    for result in (relay, clean, slowed):
        section.rows.append(
            [result.name, f"{result.messages:,}", f"{result.seconds:.1f}", f"{result.rate:.0f}", str(result.deferred)]
        )
    # The same messages (the non-tarpit ones) are timed in the direct and the tarpit runs.
    to_relay, slowdown = clean.rate / relay.rate, slowed.seconds / clean.seconds
    section.ratios += [
        Ratio("direct / relay (messages/s, no tarpits)", to_relay, ">= 0.8", to_relay >= 0.8),
        Ratio("non-tarpit messages' time, with / without tarpits", slowdown, "<= 1.2", slowdown <= 1.2),
    ]
    return [section]


SCENARIO = Scenario(
    name="isolation",
    help="direct delivery (mx://) against a relay, and 40 destinations' time beside 10 tarpits",
    add_arguments=add_arguments,
    tiny={"messages": 60, "domains": 6, "hosts": 12, "tarpits": 1, "tarpit_seconds": 1, "workers": 1, "threads": 2},
    run=run,
)

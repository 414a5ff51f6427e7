"""Scenario 2, dispatch: accepted messages drained by Celery workers into an SMTP sink.

The messages are bulk-inserted as `accepted` rows due now (what `POST /v1/send` leaves behind,
without measuring the accept path again), then one notification, as each send's statement makes,
wakes the dispatch loops of real `celery -A config worker` processes (messaging/outbound/loop.py;
other scenarios' domains paused), which claim, render, DKIM-sign and send them over SMTP to bench.sink,
a discarding aiosmtpd server in its own process. Timed from the first claim to the last
`delivered` event. Each worker process runs the thread pool of docs/delivery.md (`--pool threads`), with
as many threads as django-post-office's default per process. Against:
- the ceiling: one smtplib connection pushing the same message, pre-rendered and unsigned, to
  the same sink in a loop (before and after the other runs; the mean is the ceiling);
- django-post-office, queueing the same messages in its own database (bench/post_office_settings.py)
  and sending them with its `send_queued_mail --processes` to the same sink, without signing:
  timed from its first sent email to its last.
"""

import argparse
import json
import resource
import secrets
import smtplib
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench import plots
from bench.budget import EVERYTHING_ELSE, CpuBudget, goal_note, pids_of
from bench.profile import Profile, excerpt, profiling
from bench.report import Issue32Goal, Ratio, Section, bottleneck_note
from bench.scenario import Context, Scenario
from bench.stack import ROOT, BenchError, cpu_seconds, discard_sink, empty_database, rss_mib, server_env

DOMAIN = "dispatch.bench.example"
WARMUP_DOMAIN = "warmup.dispatch.bench.example"
# Issue 32's goals: the workers' rate (DKIM on) over the smtplib ceiling's, and over django-post-office's.
GOAL_CEILING, GOAL_PEER = 0.7, 1.3
SENDER = f"Acme Shop <shop@{DOMAIN}>"
RECIPIENT = "customer@example.org"
SUBJECT = "Your order #12345 has shipped"
TEXT = "Hello,\n\nyour order is on its way.\n" * 20
HTML = "<p>Hello,</p><p>your order is <b>on its way</b>.</p>\n" * 20
RSS_AFTER = 1000
POLL = 0.005  # seconds between looks for the first claim (the start of the timing)
SIGNATURES = 300  # timed to tell what rendering, signing and the RSA operation alone cost a message


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=10_000, help="messages to dispatch (default 10 000)")
    parser.add_argument(
        "--workers", type=int, default=2, help="Celery worker processes, and post_office's --processes (default 2)"
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=5,
        help="batches each worker process sends at once (its thread pool), as post_office's threads per process "
        "(default 5, post_office's default)",
    )
    parser.add_argument("--warmup", type=int, default=200, help="messages sent first, untimed (default 200)")
    parser.add_argument(
        "--profile-seconds",
        type=int,
        default=5,
        help="py-spy profile of the workers, on more messages, untimed (0: none)",
    )


@dataclass
class Run:
    seconds: float
    messages: int
    sink_cpu: float  # the sink's CPU seconds per wall second during the run
    rss: dict[str, list[float]] = field(default_factory=dict)  # when -> MiB per worker process
    worker_cpu: float = 0.0  # the workers' CPU seconds per message
    budget: str = ""  # where the machine's CPU went (bench/budget.py)
    cpu: CpuBudget | None = None  # the same, as figures
    profile: Profile = field(default_factory=Profile)  # the workers, while they drained more messages, untimed
    client_ms: float = 0.0  # the ceiling's: its own CPU per message, the client side of the SMTP conversation

    @property
    def rate(self) -> float:
        return self.messages / max(self.seconds, 1e-9)


def _messages(domain, count: int) -> None:
    from django.utils import timezone

    from messaging.models import Direction, Message, Status

    now = timezone.now()
    Message.objects.bulk_create(
        (
            Message(
                domain=domain,
                direction=Direction.SENT,
                status=Status.ACCEPTED,
                from_address=SENDER,
                to=[RECIPIENT],
                subject=SUBJECT,
                text=TEXT,
                html=HTML,
                next_attempt_at=now,
            )
            for _ in range(count)
        ),
        batch_size=2000,
    )


def _counts(domain) -> dict[str, int]:
    from django.db.models import Count

    from messaging.models import Message

    rows = Message.objects.filter(domain=domain).values("status").annotate(n=Count("id"))
    return {row["status"]: row["n"] for row in rows}


def _accepted(domain):
    """The domain's messages still `accepted`, read off their partial index: polling them costs less
    as the backlog drains (counting every status instead cost PostgreSQL 15.8 ms a poll, a sixth of a
    core at ten polls a second, taken from the workers it was timing)."""
    from messaging.models import Message, Status

    return Message.objects.filter(domain=domain, status=Status.ACCEPTED)


def _wait_delivered(domain, count: int, *, timeout: float, at: int, on_reaching) -> None:
    """Until none of the domain's `count` messages is left accepted, all of them delivered;
    `on_reaching()` once `at` have been handled. Past `at`, each poll reads one index entry."""
    deadline, reached = time.monotonic() + timeout, False
    while True:
        if reached:
            if not _accepted(domain).exists():
                break
        elif (handled := count - _accepted(domain).count()) >= at:
            on_reaching()
            reached = True
            if handled >= count:
                break
        if time.monotonic() > deadline:
            raise BenchError(f"dispatch: not all delivered after {timeout:.0f} s, statuses {_counts(domain)}")
        time.sleep(0.1)
    if (counts := _counts(domain)).get("delivered", 0) < count:
        raise BenchError(f"dispatch: not all {count} messages were delivered, statuses {counts}")


def _product(args: argparse.Namespace, env: dict[str, str], sink_pid: int) -> Run:
    from django.db.models import Max

    from domains.models import Domain
    from domains.services import domain_create
    from mailservice.doorbell import wake_dispatchers
    from messaging.models import EventType, Message, MessageEvent
    from tests.harness import celery_worker, wait_until

    domain, warmup = domain_create(name=DOMAIN, verified=True), domain_create(name=WARMUP_DOMAIN, verified=True)
    # Messages other scenarios left accepted (scenario 1's sends) are not this one's to drain:
    # their domains are paused, which takes them out of the sweeper's and the claim's due set.
    Domain.objects.exclude(pk__in=(domain.pk, warmup.pk)).update(sending_paused=True)
    with ExitStack() as stack:
        workers = [
            stack.enter_context(celery_worker(beat=False, threads=args.threads, **env)) for _ in range(args.workers)
        ]
        wait_until(
            lambda: all("ready." in Path(worker.log_path).read_text() for worker in workers),
            timeout=60,
            message="the Celery workers",
        )
        pids = [worker.process.pid for worker in workers]
        # Imports, database and relay connections, the DKIM key: what a long-running worker has paid already.
        _messages(warmup, args.warmup)
        wake_dispatchers()
        _wait_delivered(warmup, args.warmup, timeout=120, at=args.warmup, on_reaching=lambda: None)
        rss = {"after the warm-up": [rss_mib(pid) for pid in pids]}

        _messages(domain, args.messages)
        measured = Message.objects.filter(domain=domain)
        budget = CpuBudget({"Celery workers": pids_of(*pids), "sink": pids_of(sink_pid)})
        with budget.measuring():
            wake_dispatchers()
            while not measured.filter(attempts__gt=0).exists():
                time.sleep(POLL)
            started = datetime.now(UTC)
            at = min(RSS_AFTER, args.messages)

            def read_rss() -> None:
                rss[f"after {at:,} messages"] = [rss_mib(pid) for pid in pids]

            _wait_delivered(domain, args.messages, timeout=60 + args.messages / 20, at=at, on_reaching=read_rss)
        rss[f"after {args.messages:,} messages"] = [rss_mib(pid) for pid in pids]
        worker_cpu = budget.spent["Celery workers"] / args.messages
        finished = MessageEvent.objects.filter(message__domain=domain, type=EventType.DELIVERED).aggregate(
            last=Max("created_at")
        )["last"]
        seconds = (finished - started).total_seconds()
        sink_cpu = budget.spent["sink"] / seconds
        profile = Profile()
        if args.profile_seconds > 0:  # more messages than the workers send meanwhile, at the rate just measured
            extra = int(args.messages / budget.wall * (args.profile_seconds + 2))
            _messages(domain, extra)
            with profiling(pids, seconds=args.profile_seconds, into=profile, workdir=ROOT / "var"):
                wake_dispatchers()
            _wait_delivered(domain, args.messages + extra, timeout=60 + extra / 20, at=0, on_reaching=lambda: None)
    return Run(
        seconds,
        args.messages,
        sink_cpu,
        rss,
        worker_cpu,
        budget=budget.note(what="the product", unit="message", count=args.messages),
        profile=profile,
        cpu=budget,
    )


def _bench_message():
    """The scenario's message as a row would hold it (unsaved)."""
    from django.utils import timezone

    from messaging.models import Message

    return Message(
        public_id=f"msg_{secrets.token_hex(12)}",
        from_address=SENDER,
        to=[RECIPIENT],
        subject=SUBJECT,
        text=TEXT,
        html=HTML,
        created_at=timezone.now(),
    )


def _ceiling(count: int, port: int, sink_pid: int) -> Run:
    """The same message, rendered once and unsigned, over one smtplib connection."""
    from django.conf import settings

    from messaging.outbound.envelope import envelope_for
    from messaging.rfc5322.rendering import render_message

    message = _bench_message()
    data = render_message(message).data
    envelope = envelope_for(
        message=message, recipients=[RECIPIENT], return_path_domain=settings.MAILSERVICE_RETURN_PATH_DOMAIN
    )
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.ehlo()
        sink_before, started, own = cpu_seconds(sink_pid), time.perf_counter(), time.process_time()
        for _ in range(count):
            smtp.sendmail(envelope.mail_from, envelope.recipients, data)
        seconds, own = time.perf_counter() - started, time.process_time() - own
    return Run(seconds, count, (cpu_seconds(sink_pid) - sink_before) / seconds, client_ms=own * 1000 / count)


def _post_office(args: argparse.Namespace, database_url: str, port: int, sink_pid: int) -> Run:
    import psycopg

    from tests.harness import child_env

    parts = urlsplit(database_url)
    url = urlunsplit(parts._replace(path=parts.path + "_post_office"))
    env = child_env(DJANGO_SETTINGS_MODULE="bench.post_office_settings")
    env.update(POST_OFFICE_DATABASE_URL=url, POST_OFFICE_SMTP_PORT=str(port))
    spec = {"count": args.messages, "sender": SENDER, "recipients": [RECIPIENT], "subject": SUBJECT}
    with empty_database(url):
        queued = subprocess.run(
            [sys.executable, "-m", "bench.post_office_queue"],
            input=json.dumps({**spec, "text": TEXT, "html": HTML}),
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if queued.returncode != 0:
            raise BenchError(f"dispatch: queueing in django-post-office failed:\n{queued.stderr[-2000:]}")
        lockfile = ROOT / "var" / f"post-office-{secrets.token_hex(4)}"
        command = [sys.executable, "-m", "django", "send_queued_mail", "--processes", str(args.workers)]
        budget = CpuBudget({"sink": pids_of(sink_pid)})
        with psycopg.connect(url, autocommit=True) as db:
            launched, children = time.perf_counter(), _children_cpu_seconds()
            with budget.measuring():
                done = subprocess.run(
                    [*command, "--lockfile", str(lockfile)], cwd=ROOT, env=env, capture_output=True, text=True
                )
            wall = time.perf_counter() - launched
            # Its processes have exited: their CPU is what this process's waited-for children used.
            budget.spent = {"django-post-office (start-up included)": _children_cpu_seconds() - children} | budget.spent
            # post_office.models.STATUS: sent is 0. Each process marks a chunk sent at once, with one timestamp.
            chunks = db.execute(
                "SELECT last_updated, count(*) FROM post_office_email WHERE status = 0 GROUP BY 1 ORDER BY 1"
            ).fetchall()
        sent = sum(count for _, count in chunks)
        if done.returncode != 0 or sent != args.messages:
            raise BenchError(f"dispatch: post_office sent {sent} of {args.messages}:\n{done.stderr[-2000:]}")
    sink_cpu = budget.spent["sink"] / wall
    note = budget.note(what="django-post-office over its whole command", unit="message", count=sent)
    if len(chunks) < 3:  # too few to time from the inside: the command's wall time, start-up included
        return Run(wall, sent, sink_cpu, budget=note)
    # From the end of its first chunk to the end of its last: the messages after the first chunk.
    return Run((chunks[-1][0] - chunks[0][0]).total_seconds(), sent - chunks[0][1], sink_cpu, budget=note)


def _children_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _rss_note(rss: dict[str, list[float]]) -> str:
    readings = "; ".join(f"{when}: " + ", ".join(f"{mib:.0f}" for mib in values) for when, values in rss.items())
    return f"Worker resident memory (VmRSS, MiB, one figure per worker process): {readings}."


def _forget_queue(redis_url: str, queue: str) -> None:
    """Remove the run's Celery queue and kombu's bindings for it from the bench's Redis database."""
    from redis import Redis

    client = Redis.from_url(redis_url)
    for key in client.scan_iter(f"*{queue}*"):
        client.delete(key)
    client.close()


@dataclass(frozen=True)
class MessageWork:
    """CPU (ms per message) of what a worker does to every message whatever the code around it, timed
    alone in this process on the scenario's message with one RSA-2048 key (the product's keys are
    RSA-2048: domains/services.py)."""

    rsa_ms: float  # the DKIM signature's PKCS#1 v1.5 SHA-256 operation alone
    render_ms: float  # render_message
    sign_ms: float  # dkim_sign whole: canonicalization, hashes and the RSA operation


def _message_work() -> MessageWork:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding, rsa

    from messaging.outbound.dkim import dkim_sign
    from messaging.rfc5322.rendering import render_message

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    signing_input = b"from:" + SENDER.encode() + b"\r\n" + b"x" * 600  # headers and the DKIM-Signature tags
    messages = [_bench_message() for _ in range(SIGNATURES)]
    started = time.process_time()
    for _ in range(SIGNATURES):
        key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())
    rendering = time.process_time()
    rendered = [render_message(message).data for message in messages]
    signing = time.process_time()
    for data in rendered:
        dkim_sign(data=data, domain=DOMAIN, selector="bench", private_key=key)
    done = time.process_time()
    return MessageWork(
        rsa_ms=(rendering - started) * 1000 / SIGNATURES,
        render_ms=(signing - rendering) * 1000 / SIGNATURES,
        sign_ms=(done - signing) * 1000 / SIGNATURES,
    )


def _own_work_note(
    budget: CpuBudget, count: int, goals: dict[str, float], *, work: MessageWork, client_ms: float
) -> str:
    """Where the workers' CPU goes: the work a sender does for every message, timed alone, and what is left."""
    per = budget.per_unit_ms(count)
    workers_ms = per["Celery workers"]
    named = work.render_ms + work.sign_ms + client_ms
    floor = sum(per.values()) - workers_ms + named
    capacity = budget.cpu_per_second()
    verdicts = "; ".join(
        f"{goal} allows {capacity * 1000 / rate:.2f} ms"
        + (" (less than this alone)" if capacity * 1000 / rate < floor else "")
        for goal, rate in goals.items()
    )
    return (
        f"Of the workers' {workers_ms:.2f} ms a message, timed alone in the bench's process on the same message: "
        f"rendering it {work.render_ms:.2f} ms, DKIM-signing it {work.sign_ms:.2f} ms (canonicalization, hashes and "
        f"the RSA operation, which alone took {work.rsa_ms:.2f} ms), and the client side of the "
        f"SMTP conversation {client_ms:.2f} ms (smtplib's own CPU in the ceiling's loops of this run). With "
        f"the sink's, PostgreSQL's and the rest's share of the machine that is {floor:.2f} ms a message; {verdicts}. "
        f"The workers' other {max(0.0, workers_ms - named):.2f} ms claim and load each batch, check suppressions "
        "and holds, bind and send the outcome's statement, write the log line and the metrics, and run Celery's loop."
    )


def _goal_notes(product: Run, goals: dict[str, float], *, signature_ms: float) -> list[str]:
    """For each missed goal (its name: the rate it asks for), what it would take, from the product's figures."""
    if product.cpu is None:
        return []
    per = product.cpu.per_unit_ms(product.messages)
    needed = {
        "the sink's (the relay's own work, the same for any sender)": per.get("sink", 0.0),
        "the DKIM signature's RSA operation (timed in this run)": signature_ms,
        "PostgreSQL's (the claim, and each outcome written durably on its own, as the issue requires)": per.get(
            "PostgreSQL", 0.0
        ),
        "Redis's and everything else's": per.get("Redis", 0.0) + per[EVERYTHING_ELSE],
    }
    return [
        goal_note(
            goal=goal,
            rate=rate,
            unit="message",
            on="the cores as busy as in this run",
            capacity=product.cpu.cpu_per_second(),
            spent_ms=sum(per.values()),
            needed=needed,
            rest="the workers' own Python (claiming, rendering, the SMTP conversation, recording, the log line)",
        )
        for goal, rate in goals.items()
        if product.rate < rate
    ]


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    if min(args.messages, args.workers, args.threads, args.warmup) < 1:
        raise BenchError("dispatch: --messages, --workers, --threads and --warmup must be positive")
    queue = f"bench-dispatch-{secrets.token_hex(4)}"
    with discard_sink() as sink:
        env = server_env(
            DATABASE_URL=ctx.services.database_url,
            REDIS_URL=ctx.services.redis_url,
            EMAIL_URL=f"smtp://127.0.0.1:{sink.port}",
            CELERY_TASK_DEFAULT_QUEUE=queue,
            # One sweeper pass queues everything that is due, straight away.
            MAILSERVICE_DISPATCH_SWEEP_GRACE="0",
            MAILSERVICE_DISPATCH_SWEEP_LIMIT=str(args.messages + args.warmup),
        )
        first = _ceiling(args.messages, sink.port, sink.pid)
        product = _product(args, env, sink.pid)
        peer = _post_office(args, ctx.services.database_url, sink.port, sink.pid)
        second = _ceiling(args.messages, sink.port, sink.pid)
    _forget_queue(ctx.services.redis_url, queue)
    ceiling_rate = (first.rate + second.rate) / 2
    section = Section(
        title="2. Dispatch",
        summary=(
            f"{args.messages:,} accepted messages (one recipient, text + HTML, "
            f"{len(TEXT) + len(HTML):,} characters of body) sent to a discarding aiosmtpd sink in its own process: "
            f"the product's Celery workers ({args.workers} processes, each with a pool of {args.threads} threads, "
            "DKIM-signing every message) against one smtplib connection pushing the same pre-rendered unsigned "
            f"message (the ceiling) and django-post-office (`send_queued_mail --processes {args.workers}`, "
            "5 threads per process, no signing)."
        ),
        header=["sender", "messages", "seconds", "messages/s", "sink CPU (share of a core)"],
    )
    rows = [
        ("ceiling: smtplib, one connection (first run)", first),
        ("product: Celery workers, DKIM on", product),
        ("django-post-office", peer),
        ("ceiling: smtplib, one connection (second run)", second),
    ]
    for name, result in rows:
        section.rows.append(
            [name, f"{result.messages:,}", f"{result.seconds:.1f}", f"{result.rate:.0f}", f"{result.sink_cpu:.0%}"]
        )
    to_ceiling, to_peer = product.rate / ceiling_rate, product.rate / peer.rate
    section.ratios += [
        Ratio(
            "product (DKIM on) / smtplib ceiling (mean of both runs)",
            to_ceiling,
            f">= {GOAL_CEILING}",
            to_ceiling >= GOAL_CEILING,
            Issue32Goal.DISPATCH_SMTPLIB,
        ),
        Ratio(
            "product / django-post-office",
            to_peer,
            f">= {GOAL_PEER}",
            to_peer >= GOAL_PEER,
            Issue32Goal.DISPATCH_POST_OFFICE,
        ),
    ]
    busiest = max(result.sink_cpu for _, result in rows)
    goals = {
        f"{GOAL_CEILING} of the smtplib ceiling": GOAL_CEILING * ceiling_rate,
        f"{GOAL_PEER} times django-post-office": GOAL_PEER * peer.rate,
    }
    work = _message_work()
    section.notes += [
        _rss_note(product.rss),
        product.budget,
        peer.budget,
        f"The workers used {product.worker_cpu * 1000:.1f} ms of CPU per message (all worker processes together, "
        f"/proc): {1 / max(product.worker_cpu, 1e-9):.0f} messages per CPU second, their rate on one core.",
        "The product is timed from the first claim (a message's attempt count moves, polled every 5 ms) to the "
        "last `delivered` event, after the workers sent "
        f"{args.warmup} untimed messages of another domain. django-post-office marks each process's chunk of a "
        "batch sent at once (one `last_updated`), so it is timed from the end of its first chunk to the end of its "
        "last, counting the messages after the first chunk: its start-up and first chunk are left out, in its favour "
        "(with fewer than three chunks, at the tiny size, its command's wall time is used).",
        "The two do not promise the same: django-post-office writes a chunk's statuses once the chunk is sent, so "
        "a worker lost mid-chunk sends the whole chunk again; the product writes each message's outcome as it is "
        "sent, so at most the message in flight is sent twice: most of the product's PostgreSQL time above.",
        bottleneck_note("The sink, in its busiest run,", busiest),
        *_goal_notes(product, goals, signature_ms=work.rsa_ms),
    ]
    if product.cpu is not None and any(product.rate < rate for rate in goals.values()):
        client_ms = (first.client_ms + second.client_ms) / 2
        section.notes.append(_own_work_note(product.cpu, product.messages, goals, work=work, client_ms=client_ms))
    rates = {name: result.rate for name, result in rows}
    section.plots.append(plots.rates(ctx.output / "dispatch.png", rates, title="2. Dispatch: messages per second"))
    if args.profile_seconds > 0:
        section.details.append(excerpt(product.profile, what="the Celery workers sending"))
    return [section]


SCENARIO = Scenario(
    name="dispatch",
    help="accepted messages drained by the Celery workers, against smtplib and django-post-office",
    add_arguments=add_arguments,
    tiny={"messages": 50, "warmup": 10, "profile_seconds": 0},
    run=run,
)

"""Scenario 4, inbound: messages per second accepted by `manage.py run_inbound_smtp`.

The real server (a subprocess on the bench database, a verified domain) and two ceilings, each in its
own process, get the same load: the durable ceiling, bench.reference.inbound (bare aiosmtpd whose
handler commits the raw message to PostgreSQL before its 250: the work the server cannot skip, and the
goal's denominator), and the old bare one, bench.sink (aiosmtpd that discards, reported beside it).
`--clients` processes each reuse one smtplib connection for their share of the messages, in
alternating rounds so a shared machine's drifting load falls on all alike. A message counts when the
server answered 250 to its DATA; for the product and the durable ceiling that is after it is committed
to the database, which is checked afterwards.
"""

import argparse
import math
import smtplib
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial

from bench import plots
from bench.budget import CpuBudget, goal_note, pids_of
from bench.profile import Profile, excerpt, profiling
from bench.report import Issue32Goal, Ratio, Section, bottleneck_note
from bench.scenario import Context, Scenario
from bench.stack import ROOT, BenchError, discard_sink, durable_inbound_sink, server_env, serving_pid, tree_cpu_seconds

DOMAIN = "inbound.bench.example"
SENDER = "customer@example.org"
RECIPIENT = f"support@{DOMAIN}"
GOAL = 0.8  # issue 32: run_inbound_smtp / (aiosmtpd + durable commit)
STORE_TIMINGS = 1_000  # at most: messages parsed and stored in the bench's own process, to time the server's own work
RAW = (
    f"From: Customer <{SENDER}>\r\nTo: <{RECIPIENT}>\r\nSubject: Where is my order #12345?\r\n"
    "Date: Sat, 21 Nov 2026 00:00:00 +0000\r\nMessage-ID: <{index}.bench@example.org>\r\n"
    "MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n"
    + "Hello, I ordered last week and have heard nothing since. Could you check?\r\n"
    * 12
)


@dataclass
class Load:
    sent: int = 0
    errors: int = 0
    seconds: float = 0.0  # wall time, all clients together
    client_cpu: list[float] = field(default_factory=list)  # per client process, CPU seconds / wall seconds
    server_cpu: float = 0.0  # CPU seconds the server used meanwhile (/proc)

    @property
    def rate(self) -> float:
        return self.sent / max(self.seconds, 1e-9)

    def cells(self) -> list[str]:
        """Messages, seconds, rate, the server's CPU per message and its messages per CPU second, refused."""
        per_core = self.sent / max(self.server_cpu, 1e-9)
        cpu_ms = self.server_cpu * 1000 / max(self.sent, 1)
        return [f"{self.sent:,}", f"{self.seconds:.1f}", f"{self.rate:.0f}", f"{cpu_ms:.2f}", f"{per_core:.0f}"] + [
            str(self.errors)
        ]


# The table's header for Load.cells, after the server's name.
HEADER = ["messages", "seconds", "messages/s", "server CPU / message (ms)", "messages/s per core", "refused"]
CPU_NOTE = (
    "Server CPU: user + system seconds of the server's process (/proc) over the measured rounds, per accepted "
    "message; messages/s per core is its inverse, a figure the shared machine's load moves much less than the rate."
)


def measured(pid: int, load: Callable[[], Load], budget: CpuBudget | None = None) -> Load:
    """`load()`, with the CPU seconds the server `pid` used meanwhile (and the machine's, into `budget`)."""
    before = tree_cpu_seconds(pid)
    with budget.measuring() if budget is not None else nullcontext():
        result = load()
    result.server_cpu = tree_cpu_seconds(pid) - before
    return result


def _durable_rows() -> int:
    """Messages the durable ceiling committed (bench.reference.schema's table, on the bench database)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM reference_inbound")
        return cursor.fetchone()[0]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=5000, help="messages per server (default 5000)")
    parser.add_argument("--clients", type=int, default=4, help="client processes, one connection each (default 4)")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds the messages are split over")
    parser.add_argument(
        "--profile-seconds", type=int, default=5, help="py-spy profile of the server in an extra round (0: none)"
    )


def _client(port: int, count: int, offset: int) -> tuple[float, float, int, int, float]:
    """(start, end, sent, refused, CPU share) of one connection sending `count` messages."""
    sent = refused = 0
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.ehlo()
        cpu, start = time.process_time(), time.time()
        for index in range(offset, offset + count):
            try:
                smtp.sendmail(SENDER, [RECIPIENT], RAW.replace("{index}", str(index)).encode())
                sent += 1
            except smtplib.SMTPResponseException:
                refused += 1
        end = time.time()
    return start, end, sent, refused, (time.process_time() - cpu) / max(end - start, 1e-9)


def _load(port: int, total: int, clients: int, offset: int) -> Load:
    share = math.ceil(total / clients)
    with ProcessPoolExecutor(clients) as pool:
        futures = [
            pool.submit(_client, port, min(share, total - i * share), offset + i * share)
            for i in range(clients)
            if total > i * share
        ]
        results = [future.result() for future in futures]
    return Load(
        sent=sum(r[2] for r in results),
        errors=sum(r[3] for r in results),
        seconds=max(r[1] for r in results) - min(r[0] for r in results),
        client_cpu=[r[4] for r in results],
    )


def _merge(into: Load, load: Load) -> None:
    into.sent, into.errors, into.seconds = into.sent + load.sent, into.errors + load.errors, into.seconds + load.seconds
    into.client_cpu += load.client_cpu
    into.server_cpu += load.server_cpu


def _own_work_ms(count: int) -> tuple[float, float]:
    """CPU (ms per message, this process) of the server's own work on the bench's message, timed alone
    after the rounds, on the same database: (parsing it, `inbound_deliver`: parsing it and storing it
    with its commit). The write's share is the difference."""
    from messaging.inbound.services import inbound_deliver, inbound_parse

    raws = [RAW.replace("{index}", f"own-{index}").encode() for index in range(count)]
    started = time.process_time()
    for raw in raws:
        inbound_parse(raw=raw, envelope_from=SENDER, deadline=time.monotonic() + 10)
    parsed = time.process_time()
    for raw in raws:
        inbound_deliver(envelope_from=SENDER, recipients=[RECIPIENT], raw=raw)
    delivered = time.process_time()
    return (parsed - started) * 1000 / count, (delivered - parsed) * 1000 / count


def _own_work_note(*, timed: int, bare_ms: float, parse_ms: float, deliver_ms: float, rate: float) -> str:
    """Why what is left is needed: the parts of the server's own work that its design requires, timed alone."""
    floor = bare_ms + deliver_ms
    allowed = 1000 / rate
    verdict = (
        "so the goal cannot be met while each message is parsed and committed before its 250 in this process, "
        "whatever the hand-off to the database thread, the log line and the metrics cost"
        if floor > allowed
        else f"leaving {allowed - floor:.2f} ms for the hand-off to the database thread, the log line and the metrics"
    )
    return (
        f"The server's own work, timed alone in the bench's process on the same message and database "
        f"({timed:,} messages, one at a time): parsing {parse_ms:.2f} ms (the stored fields and the bounce and "
        f"complaint classification read it) and the durable write {deliver_ms - parse_ms:.2f} ms of the caller's "
        f"CPU (one statement stores the message and its event; it is committed before the 250, so nothing "
        f"acknowledged is lost). With the SMTP conversation ({bare_ms:.2f} ms) that is {floor:.2f} ms per message "
        f"against the {allowed:.2f} ms the goal allows, {verdict}."
    )


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from domains.services import domain_create
    from messaging.models import Direction, Message
    from tests.harness import inbound_smtp_server

    if args.messages < 1 or args.clients < 1 or args.rounds < 1:
        raise BenchError("inbound: --messages, --clients and --rounds must be positive")
    domain = domain_create(name=DOMAIN, verified=True)
    env = server_env(
        DATABASE_URL=ctx.services.database_url,
        REDIS_URL=ctx.services.redis_url,
        MAILSERVICE_INBOUND_HOST="mx.bench.example",
    )
    ceiling, durable, product = Load(), Load(), Load()
    per_round = max(1, args.messages // args.rounds)
    with (
        discard_sink() as sink,
        durable_inbound_sink(ctx.services) as durable_sink,
        inbound_smtp_server(**env) as port,
    ):
        _load(port, args.clients * 2, args.clients, 0)  # warm-up: connections, imports, the first queries
        warmup, pid = args.clients * 2, serving_pid(port)
        budgets = {
            "ceiling": CpuBudget({"bare aiosmtpd": pids_of(sink.pid)}),
            "durable": CpuBudget({"aiosmtpd + durable commit": pids_of(durable_sink.pid)}),
            "product": CpuBudget({"run_inbound_smtp": pids_of(pid)}),
        }
        for i in range(args.rounds):
            _merge(
                ceiling, measured(sink.pid, partial(_load, sink.port, per_round, args.clients, 0), budgets["ceiling"])
            )
            durable_load = partial(_load, durable_sink.port, per_round, args.clients, 0)
            _merge(durable, measured(durable_sink.pid, durable_load, budgets["durable"]))
            offset = warmup + i * per_round
            _merge(product, measured(pid, partial(_load, port, per_round, args.clients, offset), budgets["product"]))
        profile, profiled = Profile(), 0
        if args.profile_seconds > 0:  # at the rate just measured, for longer than the profile
            count = int(product.rate * (args.profile_seconds + 2))
            with profiling([pid], seconds=args.profile_seconds, into=profile, workdir=ROOT / "var"):
                profiled = _load(port, count, args.clients, warmup + args.rounds * per_round).sent
    stored = Message.objects.filter(domain=domain, direction=Direction.RECEIVED).count() - warmup - profiled
    if stored != product.sent:
        raise BenchError(f"inbound: the server answered 250 to {product.sent} messages but stored {stored}")
    if (kept := _durable_rows()) != durable.sent:
        raise BenchError(f"inbound: the durable ceiling answered 250 to {durable.sent} messages but stored {kept}")
    section = Section(
        title="4. Inbound",
        summary=(
            f"Messages ({len(RAW):,} bytes each, one recipient on a verified domain) accepted by "
            f"`manage.py run_inbound_smtp` (stored as received messages) against bare aiosmtpd whose handler "
            f"commits the raw message to PostgreSQL before its 250 (the durable ceiling) and, beside it, bare "
            f"aiosmtpd that discards, from {args.clients} smtplib client processes, each reusing one connection; "
            f"{per_round * args.rounds:,} messages per server in {args.rounds} alternating rounds."
        ),
        header=["server", *HEADER],
    )
    loads = (
        ("ceiling: aiosmtpd + durable commit", durable),
        ("old ceiling: bare aiosmtpd, discards", ceiling),
        ("run_inbound_smtp", product),
    )
    for name, load in loads:
        section.rows.append([name, *load.cells()])
    section.failed_requests = ceiling.errors + durable.errors + product.errors
    ratio = product.rate / max(durable.rate, 1e-9)
    section.ratios += [
        Ratio(
            "run_inbound_smtp / (aiosmtpd + durable commit)",
            ratio,
            f">= {GOAL}",
            ratio >= GOAL,
            Issue32Goal.INBOUND_DURABLE,
        ),
        Ratio("run_inbound_smtp / bare aiosmtpd (the old ceiling)", product.rate / max(ceiling.rate, 1e-9)),
        Ratio("(aiosmtpd + durable commit) / bare aiosmtpd", durable.rate / max(ceiling.rate, 1e-9)),
    ]
    busiest = max(ceiling.client_cpu + durable.client_cpu + product.client_cpu)
    section.notes += [
        CPU_NOTE,
        budgets["product"].note(what="run_inbound_smtp's rounds", unit="message", count=product.sent),
        budgets["durable"].note(what="the durable ceiling's rounds", unit="message", count=durable.sent),
        budgets["ceiling"].note(what="the bare aiosmtpd's rounds", unit="message", count=ceiling.sent),
        bottleneck_note("The busiest client process", busiest, hint="; try more --clients."),
    ]
    if ratio < GOAL:
        # One process serves every session: its CPU per message bounds the rate, whatever the cores do.
        server_ms = budgets["product"].per_unit_ms(product.sent)["run_inbound_smtp"]
        bare_ms = budgets["ceiling"].per_unit_ms(ceiling.sent)["bare aiosmtpd"]
        durable_ms = budgets["durable"].per_unit_ms(durable.sent)["aiosmtpd + durable commit"]
        timed = min(STORE_TIMINGS, args.messages)
        parse_ms, deliver_ms = _own_work_ms(timed)
        section.notes += [
            goal_note(
                goal=f"{GOAL} of aiosmtpd + durable commit",
                rate=GOAL * durable.rate,
                unit="message",
                capacity=1.0,
                on="the one core its single process can use",
                spent_ms=server_ms,
                needed={
                    "the SMTP conversation and the committed insert, as the durable ceiling's process spends them "
                    "(its CPU per message)": durable_ms
                },
                rest="the server's own work on each message (parsing, storing it and committing before the 250, "
                "the log line, the hand-off to the database thread)",
            ),
            _machine_goal_note(budgets, product=product, durable=durable),
            _own_work_note(
                timed=timed,
                bare_ms=bare_ms,
                parse_ms=parse_ms,
                deliver_ms=deliver_ms,
                rate=GOAL * durable.rate,
            ),
        ]
    rates = {
        "ceiling: aiosmtpd + durable commit": durable.rate,
        "old ceiling: bare aiosmtpd": ceiling.rate,
        "run_inbound_smtp": product.rate,
    }
    section.plots.append(plots.rates(ctx.output / "inbound.png", rates, title="4. Inbound: messages per second"))
    if args.profile_seconds > 0:
        section.details.append(excerpt(profile, what="run_inbound_smtp"))
    return [section]


def _machine_goal_note(budgets: dict[str, CpuBudget], *, product: Load, durable: Load) -> str:
    """What the goal would take of the whole machine: on a loaded machine its cores, not the server's one
    process, bound the rate, and the PostgreSQL work the product adds to the ceiling's counts there."""
    product_per = budgets["product"].per_unit_ms(product.sent)
    durable_per = budgets["durable"].per_unit_ms(durable.sent)
    beyond_postgres = max(0.0, product_per.get("PostgreSQL", 0.0) - durable_per.get("PostgreSQL", 0.0))
    return goal_note(
        goal=f"{GOAL} of aiosmtpd + durable commit, on the whole machine",
        rate=GOAL * durable.rate,
        unit="message",
        capacity=budgets["product"].cpu_per_second(),
        on="the cores as busy as in this run",
        spent_ms=sum(product_per.values()),
        needed={
            "the durable ceiling's whole cost (its process, its PostgreSQL, the clients, the kernel, other work)": sum(
                durable_per.values()
            ),
            "PostgreSQL's beyond it (the received event's row, and the message row's indexes, in the same "
            "statement)": beyond_postgres,
        },
        rest="run_inbound_smtp's own work beyond the ceiling's process (parsing and classifying, the hand-off "
        "to the database thread, the log line, the metrics)",
    )


SCENARIO = Scenario(
    name="inbound",
    help="messages per second accepted by run_inbound_smtp, against aiosmtpd committing each message",
    add_arguments=add_arguments,
    tiny={"messages": 30, "clients": 2, "rounds": 1, "profile_seconds": 0},
    run=run,
)

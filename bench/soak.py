"""Chaos soak: a steady stream of sends through the API while the infrastructure under it breaks.

    python bench/soak.py [--seconds N] [--output FILE]      (make soak; SOAK_SECONDS, default 300)

Everything runs on private instances this script starts and throws away: a PostgreSQL cluster
(initdb in a temporary directory), a redis-server, an SMTP sink, two gunicorn web processes and
two Celery workers (one with beat). The shared PostgreSQL and Redis are never touched, because
this script restarts what it uses.

A load generator sends inline and template sends from several domains and keys, plus invalid
bodies, spreading requests over both web processes and failing over to the other when one is
down, as a load balancer would. A chaos loop meanwhile, in a shuffled order per round, SIGKILLs
a worker and starts it again, restarts Redis (its queue is lost: no persistence), restarts
PostgreSQL (fast shutdown: connections cut), has the SMTP sink answer 421/451 for a while and
then drop its connections, and restarts a web process.

With `--direct` (make soak-direct) the workers deliver directly (EMAIL_URL=mx://): the recipients'
domain has its MX on loopback, found through a DNS server on loopback (tests/dns_server.py), the
sink being that MX; the chaos loop also has DNS answer SERVFAIL, then time out, for a while.

After the load stops and the queue drains, it checks: every send answered 200 reached the sink
exactly once (by Message-ID `<{id}@{domain}>`) and reads `delivered`; every other answer is an
ApiError with a status from the spec's table (503 is expected during a database outage; a 500 or
an HTML page is a failure); nothing is stuck `accepted`. It prints and saves a summary and exits
non-zero if any check failed.
"""

import argparse
import logging
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.dns_server import Zone, dns_server  # noqa: E402 - the project root must be importable first
from tests.harness import (  # noqa: E402
    CeleryWorker,
    PostgresCluster,
    RedisServer,
    SmtpSink,
    WebProcess,
    child_env,
    free_port,
    running,
    smtp_sink,
    wait_until,
)

SPEC_ERROR_STATUSES = {400, 401, 403, 404, 413, 429, 503}
DOMAINS = ["alpha.example.com", "beta.example.net", "gamma.example.org"]
RECIPIENT_DOMAIN = "example.org"  # every recipient's (request_for); in direct mode its MX is the sink

# Retries fast enough that the soak drains in seconds, and enough attempts that no outage the
# chaos loop causes (a few seconds each) uses them all up: a message must be delivered, not failed.
CHILD_SETTINGS = {
    "MAILSERVICE_DISPATCH_BACKOFF_BASE": "0.5",
    "MAILSERVICE_DISPATCH_BACKOFF_MAX": "4",
    "MAILSERVICE_DISPATCH_MAX_ATTEMPTS": "60",
    "MAILSERVICE_DISPATCH_SWEEP_INTERVAL": "1",
    "MAILSERVICE_DISPATCH_SWEEP_GRACE": "3",
    "MAILSERVICE_DISPATCH_LEASE_SECONDS": "15",
    "MAILSERVICE_SMTP_TIMEOUT": "5",
    "CELERY_VISIBILITY_TIMEOUT": "30",
    "DATABASE_CONN_MAX_AGE": "60",  # the production default: persistent connections must survive a restart
    "LOG_LEVEL": "WARNING",
}
DIRECT_SETTINGS = {"EMAIL_URL": "mx://", "MAILSERVICE_MX_ALLOW_PRIVATE": "true", "MAILSERVICE_DNS_TIMEOUT": "1"}


@dataclass(frozen=True)
class Sender:
    domain: str
    key: str
    template: str


@dataclass
class Answer:
    kind: str  # "inline", "template" or "invalid:<what>"
    status: int | None  # None: no answer (the connection was cut)
    body: object = None
    content_type: str = ""
    domain: str = ""
    at: float = 0.0  # when the answer came, in seconds since the load began (the nodes test's throughput)
    took: float = 0.0  # seconds from the request to its answer (the nodes test's longest wait)


@dataclass
class Results:
    answers: list[Answer] = field(default_factory=list)
    chaos: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)  # what did not come back after a chaos action
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, answer: Answer) -> None:
        with self.lock:
            self.answers.append(answer)

    def log(self, started: float, what: str) -> None:
        line = f"{time.monotonic() - started:6.1f}s  {what}"
        print(line, flush=True)
        with self.lock:
            self.chaos.append(line)


def make_senders() -> list[Sender]:
    """Three verified domains, two keys each, a published template each (in the private database)."""
    from tests.factories import ApiKeyFactory, DomainFactory, TemplateFactory, TemplateVersionFactory

    senders = []
    for name in DOMAINS:
        domain = DomainFactory(name=name)
        template = TemplateFactory(domain=domain, slug="receipt")
        TemplateVersionFactory(
            template=template,
            number=1,
            subject="Receipt {{ order }}",
            text="Order {{ order }}",
            html="<p>{{ order }}</p>",
        )
        senders += [Sender(name, ApiKeyFactory(domain=domain).secret, template.slug) for _ in range(2)]
    return senders


def request_for(sender: Sender, senders: list[Sender], rng: random.Random, n: int) -> tuple[str, dict, str]:
    """(kind, headers-free JSON body or raw text, bearer key) for request number `n`."""
    base = {"from": f"Soak <soak@{sender.domain}>", "to": [f"user{n % 97}@example.org"]}
    roll = rng.random()
    if roll < 0.6:
        return "inline", base | {"subject": f"Soak {n}", "text": f"Message {n}", "html": f"<p>{n}</p>"}, sender.key
    if roll < 0.85:
        template = {"id": sender.template, "variables": {"order": n}}
        return "template", base | {"template": template, "cc": "audit@example.org"}, sender.key
    other = next(s for s in senders if s.domain != sender.domain)
    invalid = [
        ("invalid:no-recipient", {"from": base["from"], "subject": "x", "text": "x"}, sender.key),
        ("invalid:unknown-field", base | {"subject": "x", "text": "x", "tracking": True}, sender.key),
        ("invalid:bad-mailbox", base | {"to": "not an address", "subject": "x", "text": "x"}, sender.key),
        ("invalid:foreign-sender", base | {"subject": "x", "text": "x"}, other.key),
        ("invalid:bad-key", base | {"subject": "x", "text": "x"}, "ms_live_nonexistent"),
        ("invalid:missing-template", base | {"template": {"id": "nope"}}, sender.key),
    ]
    return invalid[n % len(invalid)]


def load(*, webs: list[WebProcess], senders: list[Sender], results: Results, stop: threading.Event, rate: float):
    """Send about `rate` requests per second until `stop`; each goes to the next web process, or the other one."""
    rng = random.Random(1)
    n = 0
    next_at = time.monotonic()
    with httpx.Client(timeout=30) as client:
        while not stop.is_set():
            n += 1
            sender = senders[n % len(senders)]
            kind, body, key = request_for(sender, senders, rng, n)
            headers = {"Authorization": f"Bearer {key}"}
            answer = Answer(kind, None, domain=sender.domain)
            for web in (webs[n % 2], webs[(n + 1) % 2]):
                try:
                    response = client.post(f"{web.url}/v1/send", json=body, headers=headers)
                except httpx.ConnectError:
                    continue  # nothing was sent: a load balancer tries the other backend
                except httpx.TransportError:
                    break  # cut mid-request: the send may or may not have happened
                answer.status = response.status_code
                answer.content_type = response.headers.get("content-type", "")
                try:
                    answer.body = response.json()
                except ValueError:
                    answer.body = response.text[:200]
                break
            results.add(answer)
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))


@dataclass
class Stack:
    cluster: PostgresCluster
    redis: RedisServer
    sink: SmtpSink
    webs: list[WebProcess]
    workers: list[CeleryWorker]
    zone: Zone | None = None  # direct delivery: the DNS the workers ask


def chaos_actions(stack: Stack, results: Results, started: float, rng: random.Random) -> dict[str, Callable[[], None]]:
    def kill_worker() -> None:
        index = rng.randrange(len(stack.workers))
        stack.workers[index].kill()
        results.log(started, f"worker {index} SIGKILLed")
        time.sleep(2)
        stack.workers[index].start()
        results.log(started, f"worker {index} started again")

    def restart_redis() -> None:
        stack.redis.restart()
        results.log(started, "redis restarted (queue contents lost)")

    def restart_postgres() -> None:
        # While a worker is in the middle of handing a message to the relay: the relay's 250
        # arrives when the database that must record it has just lost every connection.
        hold = stack.sink.behaviour.hold = threading.Event()
        sending = stack.sink.in_data
        with suppress(AssertionError):
            wait_until(lambda: stack.sink.in_data > sending, timeout=5, message="a worker in DATA")
        restart_began = time.monotonic()
        stack.cluster.pg_ctl("restart")
        restart_took = time.monotonic() - restart_began
        stack.sink.behaviour.hold = None
        hold.set()
        results.log(
            started,
            f"postgresql restarted (fast: connections cut) in {restart_took:.1f} s "
            f"with {stack.sink.in_data - sending} DATA held",
        )

    def sink_outage() -> None:
        reply = rng.choice(["421 4.3.2 Service not available, closing", "451 4.3.0 Try again later"])
        stack.sink.behaviour.data_reply = reply
        results.log(started, f"sink answers {reply[:3]} to DATA")
        time.sleep(5)
        stack.sink.behaviour.drop = True
        results.log(started, "sink drops connections at DATA")
        time.sleep(3)
        stack.sink.behaviour.drop = False
        stack.sink.behaviour.data_reply = None
        results.log(started, "sink accepts again")

    def restart_web() -> None:
        index = rng.randrange(len(stack.webs))
        stack.webs[index].stop()
        results.log(started, f"web {index} stopped")
        stack.webs[index].start()
        results.log(started, f"web {index} started again")

    def dns_outage() -> None:
        zone = stack.zone
        assert zone is not None
        zone.failing.add(RECIPIENT_DOMAIN)
        results.log(started, "DNS answers SERVFAIL for the recipients' domain")
        time.sleep(4)
        zone.failing.discard(RECIPIENT_DOMAIN)
        zone.delay = float(DIRECT_SETTINGS["MAILSERVICE_DNS_TIMEOUT"]) + 1
        results.log(started, "DNS lookups time out")
        time.sleep(4)
        zone.delay = 0.0
        results.log(started, "DNS answers again")

    actions = {
        "kill_worker": kill_worker,
        "restart_redis": restart_redis,
        "restart_postgres": restart_postgres,
        "sink_outage": sink_outage,
        "restart_web": restart_web,
    }
    if stack.zone is not None:
        actions["dns_outage"] = dns_outage
    return actions


def chaos(*, stack: Stack, results: Results, stop: threading.Event, interval: float, seed: int) -> None:
    """Every `interval` seconds one action; each round runs every action once, in a shuffled order."""
    rng = random.Random(seed)
    started = time.monotonic()
    actions = chaos_actions(stack, results, started, rng)
    while True:
        names = list(actions)
        rng.shuffle(names)
        for name in names:
            if stop.wait(interval):
                return
            try:
                actions[name]()
            except Exception as exc:  # noqa: BLE001 - reported as a failed check, the load goes on
                results.log(started, f"{name} FAILED: {exc}")
                results.broken.append(f"{name}: {exc}")


def _is_api_error(answer: Answer) -> bool:
    body = answer.body
    if not answer.content_type.startswith("application/json") or not isinstance(body, dict) or set(body) != {"error"}:
        return False
    error = body["error"]
    return (
        isinstance(error, dict)
        and set(error) == {"code", "message", "request_id"}
        and all(isinstance(error[name], str) for name in error)
        and bool(error["code"])
        and bool(error["request_id"])
    )


@dataclass
class Outcome:
    """What the soak's answers, the database and the sink say, read once; each invariant below is checked
    against it."""

    answers: list[Answer]
    at_sink: Counter  # Message-ID -> copies the sink accepted
    statuses: dict[str, str]  # message id -> its status in the database, for every send answered 200
    stuck: int  # messages still `accepted` once the queue drained

    @property
    def accepted(self) -> list[Answer]:
        return [a for a in self.answers if a.status == 200]

    @property
    def errors(self) -> list[Answer]:
        return [a for a in self.answers if a.status not in (None, 200)]

    @property
    def wanted(self) -> dict[str, str]:
        """Message id -> domain, for every send answered 200."""
        return {a.body["id"]: a.domain for a in self.accepted}  # type: ignore[index]  # a 200 always has a JSON body

    def copies(self, mid: str, domain: str) -> int:
        return self.at_sink[f"<{mid}@{domain}>"]


def outcome_read(results: Results, sink: SmtpSink) -> Outcome:
    from django.db import connection

    from messaging.models import Message, Status

    connection.close()  # the soak process's own connection did not survive the restarts
    wanted = {a.body["id"] for a in results.answers if a.status == 200}  # type: ignore[index]
    return Outcome(
        answers=results.answers,
        at_sink=sink.message_ids(),
        statuses=dict(Message.objects.filter(public_id__in=wanted).values_list("public_id", "status")),
        stuck=Message.objects.filter(status=Status.ACCEPTED).count(),
    )


# The invariants, one function each: what breaks it (empty: it holds).


def lost(outcome: Outcome) -> list[str]:
    return [mid for mid, domain in outcome.wanted.items() if outcome.copies(mid, domain) == 0]


def duplicated(outcome: Outcome) -> list[str]:
    return [mid for mid, domain in outcome.wanted.items() if outcome.copies(mid, domain) > 1]


def undelivered(outcome: Outcome) -> list[str]:
    from messaging.models import Status

    return [mid for mid in outcome.wanted if outcome.statuses.get(mid) != Status.DELIVERED]


def malformed_errors(outcome: Outcome) -> list[Answer]:
    return [a for a in outcome.errors if a.status not in SPEC_ERROR_STATUSES or not _is_api_error(a)]


def invalid_accepted(outcome: Outcome) -> list[Answer]:
    return [a for a in outcome.accepted if a.kind.startswith("invalid:")]


def valid_refused(outcome: Outcome) -> list[Answer]:
    """A valid send may meet a database outage (503), nothing else."""
    return [a for a in outcome.errors if not a.kind.startswith("invalid:") and a.status != 503]


INVARIANTS: list[tuple[str, Callable[[Outcome], list]]] = [
    ("lost (answered 200, never reached the sink)", lost),
    ("duplicated at the sink", duplicated),
    ("answered 200 but not delivered", undelivered),
    ("error answers outside the spec (status or shape)", malformed_errors),
    ("invalid bodies answered 200", invalid_accepted),
    ("valid sends refused with something other than 503", valid_refused),
]


def _shown(items: list) -> list[str]:
    return [item if isinstance(item, str) else f"{item.kind} {item.status} {item.body!r}" for item in items[:5]]


def summary_of(outcome: Outcome) -> dict:
    wanted = outcome.wanted
    expected_headers = {f"<{mid}@{domain}>" for mid, domain in wanted.items()}
    summary = {
        "sent": len(outcome.answers),
        "accepted (200)": len(outcome.accepted),
        "delivered (at the sink, by Message-ID)": sum(1 for mid, d in wanted.items() if outcome.copies(mid, d)),
        "duplicates": len(duplicated(outcome)),
        "lost": len(lost(outcome)),
        "stuck accepted": outcome.stuck,
        "no answer (connection cut mid-request)": sum(1 for a in outcome.answers if a.status is None),
        "delivered without a 200 (answer lost)": sum(1 for header in outcome.at_sink if header not in expected_headers),
        "messages at the sink": sum(outcome.at_sink.values()),
    }
    for status, count in sorted(Counter(a.status for a in outcome.errors).items()):
        summary[f"error answers {status}"] = count
    for (kind, status), count in sorted(Counter((a.kind, str(a.status)) for a in outcome.answers).items()):
        summary[f"{kind} answered {status}"] = count
    return summary


def verify(results: Results, sink: SmtpSink) -> tuple[dict, list[str]]:
    """The summary figures and the list of failed checks (empty: the soak passed)."""
    outcome = outcome_read(results, sink)
    failures = [f"{len(items)} {label}: {_shown(items)}" for label, check in INVARIANTS if (items := check(outcome))]
    if outcome.stuck:
        failures.append(f"{outcome.stuck} messages stuck accepted")
    failures += [f"did not recover: {what}" for what in results.broken]
    return summary_of(outcome), failures


def report(
    *, summary: dict, failures: list[str], results: Results, seconds: float, rate: float, seed: int, direct: bool
) -> str:
    delivery = "direct delivery (mx://, the sink as the MX, DNS on loopback)" if direct else "a relay (the sink)"
    lines = [
        "# Chaos soak" + (" (direct delivery)" if direct else ""),
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {seconds:.0f} s of load at {rate:g} requests/s; chaos seed {seed}.",
        "Private PostgreSQL, Redis and SMTP sink; two gunicorn web processes, two Celery workers (one with beat); "
        f"delivery through {delivery}.",
        "",
        "| | count |",
        "|---|---:|",
        *[f"| {name} | {value} |" for name, value in summary.items()],
        "",
        "Result: " + ("PASS" if not failures else "FAIL"),
        *[f"- {failure}" for failure in failures],
        "",
        "## Chaos events",
        "",
        "```",
        *results.chaos,
        "```",
        "",
    ]
    return "\n".join(lines)


def drain(timeout: float) -> None:
    """Wait until nothing is left to send, then a little longer, so a late duplicate would show."""
    from django.db import OperationalError, connection

    from messaging.models import Message, Status

    def drained() -> bool:
        try:
            return not Message.objects.filter(status=Status.ACCEPTED).exists()
        except OperationalError:
            connection.close()
            return False

    wait_until(drained, timeout=timeout, interval=0.5, message="the queue to drain")
    time.sleep(5)


def setup_database(*, database_url: str, redis_url: str) -> list[Sender]:
    """Django on the private database (migrated) and Redis, for this process and the children it starts
    (child_env copies this environment); the senders, made in it."""
    os.environ.update(
        DATABASE_URL=database_url,
        REDIS_URL=redis_url,
        SECRET_KEY=os.environ.get("SECRET_KEY") or "soak-only-secret-key-not-for-production-0123456789",
        # A throwaway key for the throwaway cluster's DKIM keys.
        MAILSERVICE_ENCRYPTION_KEYS=os.environ.get("MAILSERVICE_ENCRYPTION_KEYS") or Fernet.generate_key().decode(),
        DJANGO_SETTINGS_MODULE="config.settings",
        MAILSERVICE_ALLOW_UNSAFE_DURABILITY="true",  # the throwaway cluster runs with fsync=off, for speed
    )
    import django
    from django.core.management import call_command

    django.setup()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    call_command("migrate", verbosity=0)
    return make_senders()


def _direct_delivery(stack: ExitStack, sink: SmtpSink) -> tuple[Zone, dict[str, str]]:
    """A DNS server naming the sink the recipients' domain's MX; the workers' settings for it."""
    zone, address = stack.enter_context(dns_server())
    zone.publish_mx(RECIPIENT_DOMAIN, f"mx.{RECIPIENT_DOMAIN}")
    zone.publish_address(f"mx.{RECIPIENT_DOMAIN}", sink.host)
    return zone, {**DIRECT_SETTINGS, "MAILSERVICE_DNS_RESOLVER": address, "MAILSERVICE_MX_PORT": str(sink.port)}


def run(*, seconds: float, rate: float, interval: float, seed: int, output: Path | None, direct: bool) -> bool:
    with (
        ExitStack() as contexts,
        running(PostgresCluster()) as cluster,
        running(RedisServer(free_port())) as redis,
        smtp_sink() as sink,
    ):
        senders = setup_database(database_url=cluster.create_database("mailservice"), redis_url=redis.url)
        zone, delivery = _direct_delivery(contexts, sink) if direct else (None, {"EMAIL_URL": sink.url})
        env = child_env(**delivery, **CHILD_SETTINGS)
        webs = [WebProcess(env), WebProcess(env)]
        workers = [CeleryWorker(env, beat=True), CeleryWorker(env, beat=False)]
        stack = Stack(cluster, redis, sink, webs, workers, zone)
        results = Results()
        try:
            for process in [*webs, *workers]:
                process.start()
            stop = threading.Event()
            threads = [
                threading.Thread(
                    target=load,
                    kwargs=dict(webs=webs, senders=senders, results=results, stop=stop, rate=rate),
                    daemon=True,
                ),
                threading.Thread(
                    target=chaos,
                    kwargs=dict(stack=stack, results=results, stop=stop, interval=interval, seed=seed),
                    daemon=True,
                ),
            ]
            for thread in threads:
                thread.start()
            time.sleep(seconds)
            stop.set()
            for thread in threads:
                thread.join()
            results.broken += [f"web {i} is not serving" for i, web in enumerate(webs) if not web.serving()]
            results.broken += [f"worker {i} exited" for i, worker in enumerate(workers) if not worker.alive()]
            drain(timeout=180)
            summary, failures = verify(results, sink)
        finally:
            for process in [*webs, *workers]:
                process.stop()
        text = report(
            summary=summary, failures=failures, results=results, seconds=seconds, rate=rate, seed=seed, direct=direct
        )
        print(text)
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(text)
        return not failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("SOAK_SECONDS", "300")))
    parser.add_argument("--rate", type=float, default=float(os.environ.get("SOAK_RATE", "8")), help="requests/s")
    parser.add_argument("--interval", type=float, default=float(os.environ.get("SOAK_CHAOS_INTERVAL", "9")))
    parser.add_argument("--seed", type=int, default=int(os.environ.get("SOAK_SEED", random.randrange(10_000))))
    parser.add_argument("--output", type=Path, help="where to save the summary (markdown)")
    parser.add_argument(
        "--direct", action="store_true", help="direct delivery (mx://), the sink as the recipients' MX, DNS chaos too"
    )
    args = parser.parse_args()
    # SIGTERM (a CI timeout) unwinds like an error, so every private server and child is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("soak: terminated"))
    passed = run(
        seconds=args.seconds,
        rate=args.rate,
        interval=args.interval,
        seed=args.seed,
        output=args.output,
        direct=args.direct,
    )
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()

"""Nodes apart: three application nodes and a database node, each in a network namespace of its own,
driven through nginx on a fourth, while the network between them and the processes on them break.

    python bench/nodes.py [--seconds N] [--output FILE]      (make nodes; NODES_SECONDS, default 300)

Needs root and iproute2/iptables (tests/harness/netns.py builds the topology and removes it, also
after a failure, and what an earlier killed run left at its start), Debian's nginx-light and the
PostgreSQL server binaries. Nodes, all on one bridge at 127.77.0.x:

- `db` (.10): a private PostgreSQL cluster and redis-server;
- `app1`..`app3` (.11-.13): gunicorn (the Procfile's web command), a Celery worker (one has beat) and
  the inbound SMTP server, as the Procfile runs them;
- `lb` (.20): nginx with deploy/nginx/mailservice.conf, the three web processes its upstreams;
- `client` (.2): this process, its load generator and the SMTP sink the workers relay to.

A steady stream of sends (bench/soak.py's mix, invalid bodies included) goes through nginx, and a few
messages to each node's inbound server, while four faults come in turn, one per slot after a warm-up:
app1 cut off from the database node (iptables DROP both ways: silence, no reset), 200 ms latency and
5 % loss between app2 and the database node, app3's worker SIGKILLed while the workers are in DATA,
PostgreSQL restarted (fast: connections cut).

Latency: `tc qdisc … netem` is what would add it, but a kernel without the sch_netem module (this
machine's Firecracker VM) answers "Specified qdisc kind is unknown". So app2 reaches PostgreSQL and
Redis through a TCP proxy in its own namespace (tests/harness/netns.py DelayProxy) that holds each
chunk app2 sends for 200 ms during the fault; the 5 % loss is iptables' `statistic` match.

Checks, after the load stops and the queue drains: every send answered 200 reached the sink exactly
once (by Message-ID) and reads `delivered`, nothing is stuck `accepted` (bench/soak.py's verify);
every error is an ApiError with a status from the spec's table, and a valid send was refused with
nothing but 503 (so no 5xx other than 503 ServiceUnavailable: nginx's 502/504 pages fail it); every
request was answered; each inbound message was stored exactly once; and after each fault the
accepted rate came back within RECOVERY_LIMIT seconds: recovery is the end of the first whole second
after the fault whose count of 200 answers reached 80 % of the median of the seconds before it.
"""

import argparse
import math
import os
import random
import signal
import smtplib
import ssl
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.soak import (  # noqa: E402 - the project root must be importable first
    CHILD_SETTINGS,
    DOMAINS,
    Answer,
    Results,
    Sender,
    drain,
    request_for,
    setup_database,
    verify,
)
from tests.harness import (  # noqa: E402
    CeleryWorker,
    ChildProcess,
    PostgresCluster,
    RedisServer,
    SmtpSink,
    WebProcess,
    child_env,
    running,
    smtp_sink,
    wait_until,
)
from tests.harness.netns import SUBNET, DelayProxy, Network, delay_proxy  # noqa: E402
from tests.harness.nginx import nginx_site  # noqa: E402

DB, LB, CLIENT = f"{SUBNET}.10", f"{SUBNET}.20", f"{SUBNET}.2"
APPS = {"app1": f"{SUBNET}.11", "app2": f"{SUBNET}.12", "app3": f"{SUBNET}.13"}
PG_PORT, REDIS_PORT, INBOUND_PORT = 5432, 6379, 2525
PROXY_PG_PORT, PROXY_REDIS_PORT = 15432, 16379  # app2's way to the database node, through the delay proxy
BEAT_NODE = "app1"  # exactly one beat (the sweeper); on a node whose worker is not the one killed

LATENCY, LOSS = 0.2, 0.05
RECOVERY_SHARE = 0.8  # recovered: a second with at least this share of the median rate before the fault
RECOVERY_LIMIT = 30.0  # seconds after a fault's end
WARM_UP_SHARE = 0.1  # of the run before the first fault
FAULT_SHARE = 0.45  # of a fault's slot that a lasting fault (cut, latency) lasts, at most FAULT_MAX seconds
FAULT_MAX = 30.0
BASELINE_MAX = 10.0  # seconds before a fault whose median is its baseline
INBOUND_EVERY = 10.0  # seconds between inbound messages to each node
INBOUND_DOMAIN = DOMAINS[0]  # a verified domain: the inbound servers take its mail


@dataclass
class Fault:
    name: str
    start: float  # seconds since the load began, planned
    duration: float  # 0: a single action (a kill, a restart)
    started: float = 0.0  # as it happened
    ended: float = 0.0
    baseline: float = 0.0  # median 200 answers a second before it
    during: float = 0.0  # median 200 answers a second while it lasted
    recovered_after: float | None = None  # seconds from its end to the end of the first second back at 80 %
    answers_503: int = 0  # 503 answers from its start to RECOVERY_LIMIT after its end, or the next fault
    longest: float = 0.0  # the longest a request answered in that time waited


@dataclass
class Nodes:
    network: Network
    cluster: PostgresCluster
    sink: SmtpSink
    proxies: list[DelayProxy]
    webs: list[WebProcess]
    workers: list[CeleryWorker]
    results: Results = field(default_factory=Results)
    events: list[str] = field(default_factory=list)
    broken: list[str] = field(default_factory=list)
    inbound_sent: list[str] = field(default_factory=list)  # Message-IDs handed to an inbound server (250)


def schedule(seconds: float) -> list[Fault]:
    """The four faults, one per slot after the warm-up; a lasting one takes FAULT_SHARE of its slot."""
    warm_up = seconds * WARM_UP_SHARE
    slot = (seconds - warm_up) / 4
    lasting = min(FAULT_MAX, slot * FAULT_SHARE)
    names = [("cut app1 from the database", lasting), ("latency and loss on app2", lasting)]
    names += [("SIGKILL app3's worker in DATA", 0.0), ("restart PostgreSQL", 0.0)]
    return [Fault(name, warm_up + index * slot, duration) for index, (name, duration) in enumerate(names)]


def fault_actions(nodes: Nodes) -> list[Callable[[Fault, Callable[[], float]], None]]:
    """The faults' actions, in schedule order; each sets its fault's `started` and `ended`."""

    def cut(fault: Fault, now: Callable[[], float]) -> None:
        nodes.network.cut("app1", DB)
        fault.started = now()
        time.sleep(fault.duration)
        nodes.network.mend("app1", DB)
        fault.ended = now()

    def latency(fault: Fault, now: Callable[[], float]) -> None:
        for proxy in nodes.proxies:
            proxy.delay = LATENCY
        nodes.network.lose("app2", DB, LOSS)
        fault.started = now()
        time.sleep(fault.duration)
        nodes.network.lose("app2", DB, LOSS, on=False)
        for proxy in nodes.proxies:
            proxy.delay = 0.0
        fault.ended = now()

    def kill_worker(fault: Fault, now: Callable[[], float]) -> None:
        # Mid-batch: every worker's DATA is held at the sink, so the one killed has a message on the wire.
        sink = nodes.sink
        hold = sink.behaviour.hold = threading.Event()
        sending = sink.in_data
        with suppress(AssertionError):
            wait_until(lambda: sink.in_data >= sending + 2, timeout=5, message="workers in DATA")
        fault.started = now()
        nodes.workers[2].kill()
        held = sink.in_data - sending
        sink.behaviour.hold = None
        hold.set()
        time.sleep(2)
        nodes.workers[2].start()
        nodes.workers[2].wait_ready()
        fault.ended = now()
        nodes.events.append(f"{fault.started:6.1f}s  ({held} DATA held at the kill)")

    def restart_postgres(fault: Fault, now: Callable[[], float]) -> None:
        fault.started = now()
        nodes.cluster.pg_ctl("restart")
        fault.ended = now()

    return [cut, latency, kill_worker, restart_postgres]


def inject(nodes: Nodes, faults: list[Fault], began: float, stop: threading.Event) -> None:
    def now() -> float:
        return time.monotonic() - began

    for fault, action in zip(faults, fault_actions(nodes), strict=True):
        if stop.wait(max(0.0, fault.start - now())):
            return
        nodes.events.append(f"{now():6.1f}s  {fault.name}")
        try:
            action(fault, now)
        except Exception as exc:  # noqa: BLE001 - reported as a failed check, the load goes on
            nodes.broken.append(f"{fault.name}: {exc}")
            fault.ended = fault.ended or now()
        nodes.events.append(f"{now():6.1f}s  {fault.name}: over")


def steady_load(
    *,
    base_url: str,
    cert: Path,
    senders: list[Sender],
    results: Results,
    stop: threading.Event,
    rate: float,
    began: float,
) -> None:
    """About `rate` requests a second through nginx from `began` (monotonic) until `stop`, each in a thread
    of its own, however slow the answers: a steady rate, not one request after another."""
    rng = random.Random(1)
    verify = ssl.create_default_context(cafile=str(cert))
    verify.check_hostname = False  # the certificate names localhost; nginx listens on the lb node's address
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=50)

    def send(sender: Sender, kind: str, body: dict, key: str) -> None:
        answer = Answer(kind, None, domain=sender.domain)
        sent = time.monotonic()
        try:
            response = client.post("/v1/send", json=body, headers={"Authorization": f"Bearer {key}"})
        except httpx.TransportError:
            pass  # no answer: counted and failed by check_answers
        else:
            answer.status = response.status_code
            answer.content_type = response.headers.get("content-type", "")
            try:
                answer.body = response.json()
            except ValueError:
                answer.body = response.text[:200]
        answer.at, answer.took = time.monotonic() - began, time.monotonic() - sent
        results.add(answer)

    # Longer than nginx's proxy_read_timeout (60 s): a backend that hangs shows as nginx's 504, not ours.
    with (
        httpx.Client(base_url=base_url, verify=verify, timeout=90, limits=limits) as client,
        ThreadPoolExecutor(max_workers=200) as pool,
    ):
        n, next_at = 0, began
        while not stop.is_set():
            n += 1
            sender = senders[n % len(senders)]
            pool.submit(send, sender, *request_for(sender, senders, rng, n))
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))


def inbound_mail(nodes: Nodes, stop: threading.Event) -> None:
    """Every INBOUND_EVERY seconds a reply to each node's inbound server; a 250 is a message it must store once."""
    n = 0
    while not stop.wait(INBOUND_EVERY):
        for node, address in APPS.items():
            n += 1
            message_id = f"inbound-{n}@replies.example.net"
            text = (
                f"From: someone@replies.example.net\r\nTo: support@{INBOUND_DOMAIN}\r\n"
                f"Subject: Reply {n}\r\nMessage-ID: <{message_id}>\r\n\r\nReply {n} to {node}.\r\n"
            )
            try:
                with smtplib.SMTP(address, INBOUND_PORT, timeout=30) as smtp:
                    smtp.sendmail("someone@replies.example.net", [f"support@{INBOUND_DOMAIN}"], text)
            except (OSError, smtplib.SMTPException):
                continue  # refused or cut: the sender's MTA would try again; nothing was promised
            nodes.inbound_sent.append(message_id)


def recovery(faults: list[Fault], answers: list[Answer], seconds: float) -> None:
    """Each fault's baseline, recovery time and 503 count, from the per-second count of 200 answers."""
    per_second = Counter(int(a.at) for a in answers if a.status == 200)
    for index, fault in enumerate(faults):
        previous_end = faults[index - 1].ended if index else 0.0
        window = min(BASELINE_MAX, (fault.started - previous_end) / 2)
        before = range(math.ceil(fault.started - window), int(fault.started))
        fault.baseline = statistics.median(per_second[s] for s in before) if before else 0.0
        fault.during = statistics.median(per_second[s] for s in range(int(fault.started), math.ceil(fault.ended)))
        # Up to the next fault's start: what comes after is the next fault's.
        limit = faults[index + 1].started if index + 1 < len(faults) else seconds
        for second in range(math.ceil(fault.ended), int(limit)):
            if fault.baseline and per_second[second] >= RECOVERY_SHARE * fault.baseline:
                fault.recovered_after = second + 1 - fault.ended
                break
        until = min(limit, fault.ended + RECOVERY_LIMIT)
        fault.answers_503 = sum(1 for a in answers if a.status == 503 and fault.started <= a.at < until)
        fault.longest = max((a.took for a in answers if fault.started <= a.at < until), default=0.0)


def check(nodes: Nodes, faults: list[Fault]) -> tuple[dict, list[str]]:
    summary, failures = verify(nodes.results, nodes.sink)
    unanswered = summary["no answer (connection cut mid-request)"]
    if unanswered:
        failures.append(f"{unanswered} requests got no answer through nginx")
    for fault in faults:
        if fault.recovered_after is None or fault.recovered_after > RECOVERY_LIMIT:
            failures.append(f"{fault.name}: the accepted rate did not recover within {RECOVERY_LIMIT:.0f} s")
    from messaging.models import Direction, Message

    received = Message.objects.filter(direction=Direction.RECEIVED).values_list("message_id_header", flat=True)
    stored = Counter(header.strip("<>") for header in received)
    summary["inbound messages accepted (250)"] = len(nodes.inbound_sent)
    summary["inbound messages stored"] = sum(1 for m in nodes.inbound_sent if stored[m])
    wrong = [m for m in nodes.inbound_sent if stored[m] != 1]
    if wrong:
        failures.append(f"{len(wrong)} inbound messages not stored exactly once: {wrong[:5]}")
    failures += [f"did not recover: {what}" for what in nodes.broken]
    return summary, failures


def report(
    *, summary: dict, failures: list[str], nodes: Nodes, faults: list[Fault], seconds: float, rate: float
) -> str:
    def recovered(fault: Fault) -> str:
        return "never" if fault.recovered_after is None else f"{fault.recovered_after:.1f} s"

    lines = [
        "# Nodes apart",
        "",
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {seconds:.0f} s of load at {rate:g} requests/s through nginx.",
        "Three application nodes (gunicorn, a Celery worker, the inbound SMTP server), a database node "
        "(PostgreSQL, Redis) and nginx, each in a network namespace of its own on one machine (veths on a bridge, "
        f"{SUBNET}.x); the workers relay to an SMTP sink beside the load generator. Timings on a shared 2-core "
        "machine: upper bounds.",
        "",
        f'Latency stands in for `tc netem`, which this kernel refuses ("Specified qdisc kind is unknown": no '
        f"sch_netem module): app2 reaches PostgreSQL and Redis through a TCP proxy in its namespace that holds each "
        f"chunk it sends {LATENCY * 1000:.0f} ms; the {LOSS:.0%} loss is iptables' statistic match, both ways.",
        "",
        "| fault | from | to | accepted/s before | during | recovered after | 503 answers | longest wait |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
        *[
            f"| {f.name} | {f.started:.1f} s | {f.ended:.1f} s | {f.baseline:g} | {f.during:g} | {recovered(f)} "
            f"| {f.answers_503} | {f.longest:.1f} s |"
            for f in faults
        ],
        "",
        "Accepted/s: the median count of 200 answers a second, by the second they came in. "
        f"Recovered: the end of the first whole second after the fault with at least {RECOVERY_SHARE:.0%} of the "
        f"median accepted rate of the (up to {BASELINE_MAX:.0f}) seconds before it; the limit is "
        f"{RECOVERY_LIMIT:.0f} s. 503 answers and the longest wait for an answer: among the answers from the fault's "
        f"start to {RECOVERY_LIMIT:.0f} s after its end or the next fault's start.",
        "",
        "| | count |",
        "|---|---:|",
        *[f"| {name} | {value} |" for name, value in summary.items()],
        "",
        "Result: " + ("PASS" if not failures else "FAIL"),
        *[f"- {failure}" for failure in failures],
        "",
        "## Events",
        "",
        "```",
        *nodes.events,
        "```",
        "",
    ]
    return "\n".join(lines)


def node_env(node: str, *, sink: SmtpSink) -> dict[str, str]:
    """The environment of a node's processes: the database node's PostgreSQL and Redis (app2's through its
    delay proxy), the sink as the relay, and bench/soak.py's fast retries."""
    host, pg_port, redis_port = (
        ("127.0.0.1", PROXY_PG_PORT, PROXY_REDIS_PORT) if node == "app2" else (DB, PG_PORT, REDIS_PORT)
    )
    return child_env(
        **CHILD_SETTINGS,
        EMAIL_URL=sink.url,
        DATABASE_URL=f"postgres://postgres@{host}:{pg_port}/mailservice",
        REDIS_URL=f"redis://{host}:{redis_port}/0",
        ALLOWED_HOSTS=f"{LB},{APPS[node]}",
        MAILSERVICE_TRUSTED_PROXIES=LB,
    )


def start_nodes(contexts: ExitStack, network: Network) -> tuple[Nodes, list[Sender], str, Path]:
    """The topology and every process on it, each stopped by `contexts`; the nodes, the senders, nginx's
    HTTPS URL and its certificate. This thread is the client node's from here on."""
    contexts.callback(network.stop)  # last out: after every process in the namespaces has stopped
    network.start()
    if network.leftovers:
        print(f"nodes: removed what an earlier run left: {network.leftovers}", flush=True)
    for node, address in [("client", CLIENT), ("db", DB), *APPS.items(), ("lb", LB)]:
        network.add_node(node, int(address.rsplit(".", 1)[1]))
    network.enter("client")  # this process's sockets (and the sink's) from here on are the client node's

    sink = contexts.enter_context(smtp_sink(host=CLIENT))
    cluster = PostgresCluster(host=DB, port=PG_PORT, netns=network.netns("db"), trusted_network=f"{SUBNET}.0/24")
    contexts.enter_context(running(cluster))
    redis = contexts.enter_context(running(RedisServer(REDIS_PORT, host=DB, netns=network.netns("db"))))
    senders = setup_database(database_url=cluster.create_database("mailservice"), redis_url=redis.url)
    proxies = [
        contexts.enter_context(delay_proxy(network, "app2", PROXY_PG_PORT, (DB, PG_PORT))),
        contexts.enter_context(delay_proxy(network, "app2", PROXY_REDIS_PORT, (DB, REDIS_PORT))),
    ]
    webs, workers, inbounds = [], [], []
    for node, address in APPS.items():
        env, netns = node_env(node, sink=sink), network.netns(node)
        webs.append(WebProcess(env, workers=1, host=address, netns=netns))
        workers.append(CeleryWorker(env, beat=node == BEAT_NODE, netns=netns))
        command = [sys.executable, "manage.py", "run_inbound_smtp", "--host", address, "--port", str(INBOUND_PORT)]
        inbounds.append(ChildProcess(command, name="inbound", env=env, netns=netns, wait_on_start=False))
    for process in [*webs, *workers, *inbounds]:
        contexts.callback(process.stop)
        process.start()
    for worker in workers:
        worker.wait_ready()
    wait_until(lambda: all(_serves_smtp(address) for address in APPS.values()), timeout=30, message="inbound")
    directory = Path(contexts.enter_context(tempfile.TemporaryDirectory(prefix="nodes-nginx-")))
    upstreams = [f"{web.host}:{web.port}" for web in webs]
    _, https_port, cert = contexts.enter_context(
        nginx_site(directory, upstreams=upstreams, host=LB, netns=network.netns("lb"))
    )
    return Nodes(network, cluster, sink, proxies, webs, workers), senders, f"https://{LB}:{https_port}", cert


def run(*, seconds: float, rate: float, output: Path | None) -> bool:
    with ExitStack() as contexts:
        nodes, senders, base_url, cert = start_nodes(contexts, Network())
        faults = schedule(seconds)
        stop = threading.Event()
        began = time.monotonic()
        load = dict(base_url=base_url, cert=cert, senders=senders, results=nodes.results, rate=rate)
        threads = [
            threading.Thread(target=steady_load, kwargs=dict(**load, stop=stop, began=began), daemon=True),
            threading.Thread(target=inject, args=(nodes, faults, began, stop), daemon=True),
            threading.Thread(target=inbound_mail, args=(nodes, stop), daemon=True),
        ]
        for thread in threads:
            thread.start()
        time.sleep(seconds)
        stop.set()
        for thread in threads:
            thread.join()
        nodes.broken += [f"web on {n} is not serving" for n, w in zip(APPS, nodes.webs, strict=True) if not w.serving()]
        nodes.broken += [f"worker on {n} exited" for n, w in zip(APPS, nodes.workers, strict=True) if not w.alive()]
        drain(timeout=180)
        recovery(faults, nodes.results.answers, seconds)
        summary, failures = check(nodes, faults)
        text = report(summary=summary, failures=failures, nodes=nodes, faults=faults, seconds=seconds, rate=rate)
    print(text)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
    return not failures


def _serves_smtp(address: str) -> bool:
    try:
        with smtplib.SMTP(address, INBOUND_PORT, timeout=1) as smtp:
            return smtp.noop()[0] == 250
    except (OSError, smtplib.SMTPException):
        return False


def main() -> None:
    if os.geteuid() != 0:
        sys.exit("nodes: needs root (network namespaces, veths, iptables)")
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("NODES_SECONDS", "300")))
    parser.add_argument("--rate", type=float, default=float(os.environ.get("NODES_RATE", "8")), help="requests/s")
    parser.add_argument("--output", type=Path, help="where to save the summary (markdown)")
    args = parser.parse_args()
    # SIGTERM (a CI timeout) unwinds like an error, so every process, namespace and rule is removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("nodes: terminated"))
    sys.exit(0 if run(seconds=args.seconds, rate=args.rate, output=args.output) else 1)


if __name__ == "__main__":
    main()

"""Scenario 10, webhook delivery: events per second the product's webhooks worker delivers to a local receiver.

`delivered` MessageEvents are bulk-inserted into the outbox (published_at NULL, as dispatch leaves
them) for a domain with `--endpoints` endpoints that want every event, then the Procfile's pair of
workers does the rest: a default-queue worker with beat runs `webhooks.pump` (fan-out into
deliveries, claims) and the webhooks worker (`-Q <webhooks queue>`, 16 threads as the Procfile)
signs and POSTs each delivery with a fresh httpx client. bench.receiver, in its own process, checks
every Standard Webhooks signature and answers 204. Timed from the insert's commit to the last valid
delivery the receiver saw, so the pump's interval (1 s) is in the figure.
Against a bare httpx loop in its own process: as many threads as the webhooks worker, each with one
keep-alive httpx.Client, POSTing the same payloads, signed beforehand, to the same receiver. Rounds
alternate between the two.
"""

import argparse
import secrets
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

import httpx

from bench.report import Ratio, Section, bottleneck_note
from bench.scenario import Context, Scenario
from bench.scenarios.dispatch import _forget_queue
from bench.stack import BenchError, cpu_seconds, server_env, tree_cpu_seconds

DOMAIN = "webhooks.bench.example"
# The Procfile's webhooks worker: `--pool threads --concurrency 16`.
WEBHOOK_THREADS = 16


@dataclass
class Delivered:
    deliveries: int = 0
    seconds: float = 0.0
    cpu: float = 0.0  # CPU seconds of the sender (the product's two workers, or the bare loop's process)
    receiver_cpu: float = 0.0
    duplicates: int = 0

    @property
    def rate(self) -> float:
        return self.deliveries / max(self.seconds, 1e-9)

    def add(self, other: "Delivered") -> None:
        self.deliveries += other.deliveries
        self.seconds += other.seconds
        self.cpu += other.cpu
        self.receiver_cpu += other.receiver_cpu
        self.duplicates += other.duplicates

    def cells(self) -> list[str]:
        cpu_ms = self.cpu * 1000 / max(self.deliveries, 1)
        return [
            f"{self.deliveries:,}",
            f"{self.seconds:.1f}",
            f"{self.rate:.0f}",
            f"{cpu_ms:.2f}",
            f"{self.deliveries / max(self.cpu, 1e-9):.0f}",
            f"{self.receiver_cpu / max(self.seconds, 1e-9):.0%}",
        ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # Small: the webhooks worker delivers tens per second on this 2-core machine (see the section's notes).
    parser.add_argument("--events", type=int, default=150, help="events per round (default 150)")
    parser.add_argument(
        "--endpoints", type=int, default=4, help="endpoints wanting every event: deliveries per event (default 4)"
    )
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    parser.add_argument("--warmup", type=int, default=20, help="events delivered first, untimed (default 20)")


def _stats(client: httpx.Client) -> dict:
    return client.get("/stats").raise_for_status().json()


def _insert_events(domain, count: int) -> None:
    """`count` delivered messages, each with its `delivered` event in the outbox, in one transaction."""
    from django.db import transaction
    from django.utils import timezone

    from messaging.models import Direction, EventType, Message, MessageEvent, Status

    now = timezone.now()
    with transaction.atomic():
        messages = Message.objects.bulk_create(
            Message(
                domain=domain,
                direction=Direction.SENT,
                status=Status.DELIVERED,
                from_address=f"shop@{DOMAIN}",
                to=["customer@example.org"],
                subject="Your order has shipped",
                text="Hello",
                created_at=now,
            )
            for _ in range(count)
        )
        MessageEvent.objects.bulk_create(
            MessageEvent(message=message, type=EventType.DELIVERED, recipient="customer@example.org", detail="250 OK")
            for message in messages
        )


def _product_round(
    count: int, expected: int, *, receiver: httpx.Client, keys: list[str], domain, pids: list[int], rx_pid: int
) -> Delivered:
    receiver.post("/configure", json=keys).raise_for_status()
    cpu_before, rx_before = sum(tree_cpu_seconds(pid) for pid in pids), cpu_seconds(rx_pid)
    started = time.time()
    _insert_events(domain, count)
    deadline = time.monotonic() + 120 + expected / 2
    while (stats := _stats(receiver))["valid"] < expected:
        if stats["invalid"]:
            raise BenchError(f"webhooks: {stats['invalid']} deliveries had an invalid signature")
        if time.monotonic() > deadline:
            raise BenchError(f"webhooks: {stats['valid']} of {expected} deliveries after the deadline")
        time.sleep(0.05)
    cpu = sum(tree_cpu_seconds(pid) for pid in pids) - cpu_before
    seconds = stats["last"] - started
    return Delivered(expected, seconds, cpu, cpu_seconds(rx_pid) - rx_before, stats["duplicates"])


def _signed(endpoints: list, keys: list[str], since) -> list[tuple[str, dict[str, str], bytes]]:
    """The payloads the product just delivered, as the bare loop sends them: path, signed headers, body."""
    from django.utils import timezone

    from webhooks.models import WebhookDelivery
    from webhooks.signing import signature_headers

    index = {endpoint.pk: i for i, endpoint in enumerate(endpoints)}
    now = timezone.now()
    requests = []
    for endpoint_id, event_id, payload in WebhookDelivery.objects.filter(created_at__gte=since).values_list(
        "endpoint_id", "event_id", "payload"
    ):
        i = index[endpoint_id]
        headers = signature_headers(event_id=event_id, timestamp=now, body=payload, secrets=[keys[i]])
        requests.append((f"/hook/{i}", {"Content-Type": "application/json", **headers}, payload.encode()))
    return requests


def _bare_loop(base_url: str, requests: list[tuple[str, dict[str, str], bytes]], threads: int) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of `threads` threads POSTing `requests` over keep-alive connections."""
    failures: list[int] = []

    def post(share: list[tuple[str, dict[str, str], bytes]]) -> None:
        with httpx.Client(base_url=base_url, timeout=10) as client:
            for path, headers, body in share:
                status = client.post(path, content=body, headers=headers).status_code
                if status != 204:
                    failures.append(status)

    workers = [threading.Thread(target=post, args=(requests[i::threads],)) for i in range(threads)]
    cpu, started = time.process_time(), time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if failures:
        raise BenchError(f"webhooks: the bare loop got {len(failures)} answers other than 204")
    return time.perf_counter() - started, time.process_time() - cpu


def _bare_round(requests, receiver: httpx.Client, *, keys: list[str], rx_pid: int) -> Delivered:
    receiver.post("/configure", json=keys).raise_for_status()
    rx_before = cpu_seconds(rx_pid)
    with ProcessPoolExecutor(1) as pool:
        seconds, cpu = pool.submit(_bare_loop, str(receiver.base_url), requests, WEBHOOK_THREADS).result()
    stats = _stats(receiver)
    if stats["valid"] != len(requests):
        raise BenchError(f"webhooks: the receiver counted {stats['valid']} of the bare loop's {len(requests)}")
    return Delivered(len(requests), seconds, cpu, cpu_seconds(rx_pid) - rx_before, stats["duplicates"])


def _receiver_ready(port: int) -> bool:
    from tests.harness import answers_http

    return answers_http(f"http://127.0.0.1:{port}/stats")


def run(args: argparse.Namespace, ctx: Context) -> list[Section]:
    from django.test import override_settings
    from django.utils import timezone

    from domains.models import Domain
    from domains.services import domain_create
    from messaging.models import MessageEvent
    from tests.harness import celery_worker, child_server, wait_until
    from webhooks.services import endpoint_create

    if min(args.events, args.endpoints, args.rounds, args.warmup) < 1:
        raise BenchError("webhooks: --events, --endpoints, --rounds and --warmup must be positive")
    domain = domain_create(name=DOMAIN, verified=True)
    # Other scenarios' events are not this one's to fan out, nor their accepted messages its workers' to send.
    MessageEvent.objects.filter(published_at__isnull=True).update(published_at=timezone.now())
    Domain.objects.exclude(pk=domain.pk).update(sending_paused=True)
    suffix = secrets.token_hex(4)
    env = server_env(
        DATABASE_URL=ctx.services.database_url,
        REDIS_URL=ctx.services.redis_url,
        CELERY_TASK_DEFAULT_QUEUE=f"bench-default-{suffix}",
        MAILSERVICE_WEBHOOK_QUEUE=f"bench-webhooks-{suffix}",
        MAILSERVICE_WEBHOOK_ALLOW_PRIVATE="true",  # the receiver is on loopback
    )
    product, bare = Delivered(), Delivered()
    command = [sys.executable, "-m", "bench.receiver", "--port", "{port}"]
    with ExitStack() as stack:
        rx = stack.enter_context(child_server(command, name="receiver", ready=_receiver_ready, env={}))
        with override_settings(MAILSERVICE_WEBHOOK_ALLOW_PRIVATE=True):
            created = [
                endpoint_create(domain=domain, url=f"http://127.0.0.1:{rx.port}/hook/{i}", event_types=[])
                for i in range(args.endpoints)
            ]
        endpoints, keys = [c.endpoint for c in created], [c.secret for c in created]
        receiver = stack.enter_context(httpx.Client(base_url=f"http://127.0.0.1:{rx.port}", timeout=10))
        workers = [
            stack.enter_context(celery_worker(beat=True, threads=2, **env)),
            stack.enter_context(
                celery_worker(beat=False, threads=WEBHOOK_THREADS, queues=env["MAILSERVICE_WEBHOOK_QUEUE"], **env)
            ),
        ]
        wait_until(
            lambda: all(" ready." in worker.log_path.read_text() for worker in workers),
            timeout=60,
            message="the Celery workers",
        )
        pids = [worker.pid for worker in workers]
        product_round = partial(_product_round, receiver=receiver, keys=keys, domain=domain, pids=pids, rx_pid=rx.pid)
        product_round(args.warmup, args.warmup * args.endpoints)
        for _ in range(args.rounds):
            since = timezone.now()
            product.add(product_round(args.events, args.events * args.endpoints))
            bare.add(_bare_round(_signed(endpoints, keys, since), receiver, keys=keys, rx_pid=rx.pid))
    for queue in (env["CELERY_TASK_DEFAULT_QUEUE"], env["MAILSERVICE_WEBHOOK_QUEUE"]):
        _forget_queue(ctx.services.redis_url, queue)
    section = Section(
        title="10. Webhook delivery",
        summary=(
            f"`delivered` events ({args.events:,} per round, {args.rounds} rounds) for a domain with {args.endpoints} "
            "endpoints that want every event, fanned out and delivered by the product's workers (a default-queue "
            f"worker with beat for `webhooks.pump`, the webhooks worker with {WEBHOOK_THREADS} threads) to "
            "bench.receiver (checks each Standard Webhooks signature, answers 204), against a bare httpx loop "
            f"({WEBHOOK_THREADS} threads, keep-alive) POSTing the same payloads, signed beforehand."
        ),
        header=[
            "sender",
            "deliveries",
            "seconds",
            "deliveries/s",
            "sender CPU / delivery (ms)",
            "deliveries/s per core",
            "receiver CPU (share of a core)",
        ],
    )
    section.rows += [["product: webhooks worker", *product.cells()], ["bare httpx loop", *bare.cells()]]
    ratio = product.rate / max(bare.rate, 1e-9)
    section.ratios.append(Ratio("product / bare httpx loop, deliveries per second", ratio))
    duplicates = product.duplicates + bare.duplicates
    if duplicates:
        raise BenchError(f"webhooks: {duplicates} deliveries arrived twice")
    busiest = max(product.receiver_cpu / product.seconds, bare.receiver_cpu / bare.seconds)
    section.notes += [
        "No goal: the issue names none for webhooks. Every delivery's signature checked by the receiver, none "
        "invalid, none delivered twice.",
        "Sender CPU: the product's two worker processes (fan-out, claims and records in the pump's worker; "
        "signing and POSTing in the webhooks worker), or the bare loop's process, over the rounds (/proc). "
        "The product opens a connection per delivery (a new httpx.Client each), the bare loop keeps one per thread.",
        f"Timed from the events' commit: up to the pump's interval (1 s) of each round is waiting for beat. "
        f"{args.warmup} events were delivered first, untimed.",
        bottleneck_note("The receiver, in its busiest run,", busiest),
    ]
    return [section]


SCENARIO = Scenario(
    name="webhooks",
    help="events per second the webhooks worker delivers to a local receiver, against a bare httpx loop",
    add_arguments=add_arguments,
    tiny={"events": 10, "endpoints": 2, "rounds": 1, "warmup": 2},
    run=run,
)

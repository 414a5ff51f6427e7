"""Delivery control with real workers (the thread-pool worker of docs/delivery.md, on Redis) and an aiosmtpd sink.

One domain's backlog never delays another's mail; the fleet keeps to the relay's rate, slows down
together when the relay asks and recovers by itself, with nothing lost or sent twice; a recipient
domain the relay defers waits as a group while others flow."""

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from django.utils import timezone

from messaging.models import Direction, Message, Status
from messaging.outbound.fleet_limits import relay_rate_status
from tests.factories import DomainFactory
from tests.harness import FAST_DISPATCH, SmtpSink, celery_worker, smtp_sink, wait_until

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

THREADS = 4


def queue(domain, count: int, *, to: str = "customer@example.org", past: float = 5) -> None:
    """`count` accepted messages of `domain`, due `past` seconds ago (as sends leave them, without the API)."""
    due = timezone.now() - timezone.timedelta(seconds=past)
    Message.objects.bulk_create(
        Message(
            domain=domain,
            direction=Direction.SENT,
            status=Status.ACCEPTED,
            from_address=f"shop@{domain.name}",
            to=[to.format(n=n)],
            subject=f"Message {n}",
            text="Hello",
            next_attempt_at=due,
        )
        for n in range(count)
    )


@contextmanager
def workers(sink: SmtpSink, *, processes: int = 1, **env: str) -> Iterator[None]:
    """`processes` worker processes (the first with the embedded beat) on a queue of their own, relaying to `sink`."""
    settings = FAST_DISPATCH | {"EMAIL_URL": sink.url, "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}"} | env
    with ExitStack() as stack:
        started = [
            stack.enter_context(celery_worker(beat=n == 0, threads=THREADS, **settings)) for n in range(processes)
        ]
        for worker in started:
            worker.wait_ready()
        yield


def from_domain(sink: SmtpSink, domain) -> int:
    return sum(1 for received in sink.received if received.mail_from.endswith(f"@{domain.name}"))


@pytest.mark.parametrize("backlog", [600])
def test_another_domains_mail_goes_out_while_one_domain_has_a_backlog(backlog):
    busy, other = DomainFactory(name="newsletter.example.com"), DomainFactory(name="app.example.com")
    queue(busy, backlog)
    with smtp_sink() as sink, workers(sink):
        wait_until(lambda: sink.received, timeout=30, message="dispatch to start")
        started = time.monotonic()
        queue(other, 20, past=0)
        # What went out before the other domain had mail at all says nothing of fairness (on a loaded
        # machine, queueing its 20 took long enough for hundreds of the backlog to go).
        sent_before = len(sink.received)
        wait_until(lambda: from_domain(sink, other) == 20, timeout=30, interval=0.01, message="the other domain's mail")
        waited = time.monotonic() - started

    order = [received.mail_from.endswith("@app.example.com") for received in sink.received]
    last_other = max(n for n, is_other in enumerate(order) if is_other)
    busy_before = order[sent_before : last_other + 1].count(False)
    assert busy_before < backlog / 2, f"{busy_before} of {backlog} backlog messages went first"
    assert waited < 5, f"the other domain's 20 messages took {waited:.1f} s"


def rate_between(samples: list[tuple[float, int]], start: float, end: float) -> float:
    """Messages per second the sink took between `start` and `end` (seconds after the first sample)."""
    t0 = samples[0][0]
    inside = [(t, n) for t, n in samples if start <= t - t0 <= end]
    (first_t, first_n), (last_t, last_n) = inside[0], inside[-1]
    return (last_n - first_n) / (last_t - first_t)


def sample(sink: SmtpSink, *, seconds: float) -> list[tuple[float, int]]:
    samples, deadline = [], time.monotonic() + seconds
    while time.monotonic() < deadline:
        samples.append((time.monotonic(), len(sink.received)))
        time.sleep(0.05)
    return samples


def test_two_worker_processes_keep_to_the_relay_rate_together():
    queue(DomainFactory(), 600)
    with smtp_sink() as sink, workers(sink, processes=2, MAILSERVICE_RELAY_RATE="50"):
        wait_until(lambda: len(sink.received) >= 10, timeout=30, message="dispatch to start")
        rate = rate_between(sample(sink, seconds=4.5), 0.5, 4.5)

    assert 45 <= rate <= 55, f"the sink took {rate:.1f} messages/s"


class ThrottlingSink(SmtpSink):
    """Answers `421 4.7.0` to every fifth MAIL FROM and closes the connection, while `throttling` is on."""

    def __init__(self) -> None:
        super().__init__()
        self.throttling = True
        self.mails = 0

    async def handle_MAIL(self, server, session, envelope, address, mail_options):  # noqa: N802 - aiosmtpd hook
        self.mails += 1
        if self.throttling and self.mails % 5 == 0:
            asyncio.get_running_loop().call_later(0.05, server.transport.close)  # once the reply is out
            return "421 4.7.0 Too many messages, slow down"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"


def test_a_relay_asking_to_slow_down_lowers_the_fleets_rate_until_it_stops(settings):
    settings.MAILSERVICE_RELAY_RATE = 50.0  # the test process reads the same shared state as the workers
    settings.MAILSERVICE_RELAY_RATE_STEP = 10.0
    queue(DomainFactory(), 400)
    sink = ThrottlingSink()
    sink.controller.start()
    try:
        with workers(sink, processes=2, MAILSERVICE_RELAY_RATE="50", MAILSERVICE_RELAY_RATE_STEP="10"):
            lowest = 50.0

            def slowed() -> bool:
                nonlocal lowest
                lowest = min(lowest, relay_rate_status()["effective"] or 50.0)
                return lowest <= 30

            wait_until(slowed, timeout=30, interval=0.05, message="the fleet to slow down")
            assert "421 4.7.0" in relay_rate_status()["reason"]
            sink.throttling = False
            wait_until(lambda: relay_rate_status()["effective"] == 50.0, timeout=20, message="the rate to recover")
            assert relay_rate_status()["reason"].startswith("recovered")
            wait_until(lambda: len(sink.received) >= 400, timeout=60, message="every message to arrive")
    finally:
        sink.controller.stop()

    assert len(sink.message_ids()) == 400 and set(sink.message_ids().values()) == {1}
    assert Message.objects.filter(status=Status.DELIVERED).count() == 400


class CountingSink(SmtpSink):
    """Counts RCPT TO commands per recipient domain."""

    def __init__(self) -> None:
        super().__init__()
        self.rcpts: dict[str, int] = {}

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802 - aiosmtpd hook
        domain = address.rpartition("@")[2]
        self.rcpts[domain] = self.rcpts.get(domain, 0) + 1
        return await super().handle_RCPT(server, session, envelope, address, rcpt_options)


def test_a_destination_the_relay_defers_waits_as_a_group_while_others_flow():
    domain = DomainFactory()
    queue(domain, 40, to="user{n}@busy.example")
    queue(domain, 40, to="user{n}@calm.example")
    sink = CountingSink()
    sink.behaviour.rejected_rcpts = {f"user{n}@busy.example": "452 4.2.2 Mailbox busy, try later" for n in range(40)}
    sink.controller.start()
    try:
        with workers(sink, MAILSERVICE_DESTINATION_BACKOFF_BASE="4"):
            wait_until(
                lambda: sum("@calm.example" in r.rcpt_tos[0] for r in sink.received) == 40,
                timeout=30,
                message="the other destination's mail",
            )
            busy = Message.objects.filter(to__0__endswith="@busy.example")
            assert set(busy.values_list("status", flat=True)) == {Status.ACCEPTED}
            assert sink.rcpts["busy.example"] <= 2 * THREADS, sink.rcpts  # a probe per batch, not 40 tries
            assert max(busy.values_list("attempts", flat=True)) <= 2

            sink.behaviour.rejected_rcpts = {}
            wait_until(lambda: len(sink.received) == 80, timeout=60, message="the held destination's mail")
    finally:
        sink.controller.stop()

    assert set(sink.message_ids().values()) == {1}

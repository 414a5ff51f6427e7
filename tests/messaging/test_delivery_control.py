"""Delivery control without workers: fair claims, the shared relay rate (AIMD), the connection cap, destination holds.

The shared state is the test run's real Redis (REDIS_URL; the cache fixture flushes it between
tests), or the in-process fallback when the run has no Redis."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from messaging.models import EventType, Message, Status
from messaging.outbound import fleet_limits
from messaging.outbound.dispatch import dispatch_batch, dispatch_claim
from messaging.outbound.domain_holds import BatchHolds, held_destinations
from messaging.outbound.envelope import Reply, SendResult
from messaging.outbound.fairness import _pending_domains
from messaging.outbound.fleet_limits import (
    is_slow_down,
    relay_connection_slot,
    relay_permit,
    relay_rate_status,
    relay_slow_down,
)
from tests.factories import DomainFactory, MessageFactory
from tests.harness import smtp_sink

pytestmark = pytest.mark.django_db


def queue(domain, count: int, **fields) -> list[Message]:
    due = timezone.now() - timedelta(seconds=1)
    return [MessageFactory(domain=domain, next_attempt_at=due, **fields) for _ in range(count)]


@pytest.fixture(autouse=True)
def _fresh_local_state(monkeypatch):
    monkeypatch.setattr(fleet_limits, "_local", fleet_limits._LocalState())


# --- fair claims ---------------------------------------------------------------------------------


def test_a_batch_is_shared_between_the_domains_with_mail_due(settings):
    backlog, other = DomainFactory(), DomainFactory()
    queue(backlog, 30)
    late = queue(other, 3)

    claimed = dispatch_claim(limit=10)

    assert len(claimed) == 10
    assert {m.pk for m in late} <= {m.pk for m in claimed}


def test_successive_batches_serve_the_domains_in_turn():
    domains = [DomainFactory() for _ in range(5)]
    for domain in domains:
        queue(domain, 4)

    served = [{m.domain_id for m in dispatch_claim(limit=2)} for _ in range(5)]

    # two domains a batch, the turn moving on: every domain served within three batches
    assert all(len(batch) == 2 for batch in served[:2])
    assert set().union(*served[:3]) == {d.pk for d in domains}


def test_a_heavier_domain_gets_a_larger_share():
    heavy, light = DomainFactory(dispatch_weight=3), DomainFactory()
    queue(heavy, 20)
    queue(light, 20)

    claimed = dispatch_claim(limit=8)

    counts = {d.pk: sum(1 for m in claimed if m.domain_id == d.pk) for d in (heavy, light)}
    assert counts == {heavy.pk: 6, light.pk: 2}


def test_a_lone_backlog_still_fills_whole_batches():
    domain = DomainFactory()
    queue(domain, 25)

    assert len(dispatch_claim(limit=20)) == 20


def test_a_paused_domain_takes_no_share():
    paused, other = DomainFactory(sending_paused=True), DomainFactory()
    queue(paused, 5)
    queue(other, 5)

    assert {m.domain_id for m in dispatch_claim(limit=10)} == {other.pk}


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the plan is PostgreSQL's")
def test_the_domains_with_mail_due_are_found_on_the_partial_index_not_over_delivered_rows():
    domain, other = DomainFactory(), DomainFactory()
    MessageFactory.create_batch(3, domain=domain, next_attempt_at=timezone.now())
    MessageFactory.create_batch(20, domain=other, status=Status.DELIVERED)
    MessageFactory(domain=other, next_attempt_at=timezone.now())
    with CaptureQueriesContext(connection) as captured:
        assert _pending_domains(after=0, limit=10) == sorted([domain.pk, other.pk])
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")  # the tiny test table would be scanned otherwise
        cursor.execute("EXPLAIN " + captured.captured_queries[-1]["sql"])
        plan = "\n".join(row[0] for row in cursor.fetchall())

    scans = [line for line in plan.splitlines() if "Scan using" in line]
    assert scans and all("message_pending_domain_idx" in line for line in scans), plan


# --- the shared relay rate ----------------------------------------------------------------------


def test_a_slow_down_answer_is_recognised():
    assert is_slow_down(Reply(421, "4.7.0 Try again later, closing connection"))
    assert is_slow_down(Reply(454, "4.7.0 Throttling failure: Maximum sending rate exceeded"))
    assert is_slow_down(Reply(451, "4.7.1 Please slow down"))
    assert not is_slow_down(Reply(451, "4.3.0 Local error"))
    assert not is_slow_down(Reply(452, "4.2.2 Mailbox full"))


def test_permits_are_spaced_at_the_configured_rate(settings):
    settings.MAILSERVICE_RELAY_RATE = 40.0
    started = time.monotonic()
    for _ in range(21):
        relay_permit()

    assert 0.4 <= time.monotonic() - started < 0.8  # 20 intervals of 25 ms after the first two
    assert relay_rate_status()["effective"] == 40.0


def test_without_a_rate_no_permit_waits():
    started = time.monotonic()
    for _ in range(200):
        relay_permit()

    assert time.monotonic() - started < 1
    assert relay_rate_status()["effective"] is None


def test_without_a_rate_a_process_asks_redis_once_per_recheck_interval(settings, monkeypatch):
    if not settings.REDIS_URL:
        pytest.skip("the in-process limits make no round trip to skip")
    asked = []
    script = fleet_limits._scripts()[0]
    monkeypatch.setattr(fleet_limits, "_scripts", lambda: (lambda **kw: asked.append(kw) or script(**kw),))
    for _ in range(200):
        relay_permit()

    assert len(asked) == 1
    time.sleep(fleet_limits.UNLIMITED_RECHECK)
    relay_permit()
    assert len(asked) == 2 and asked[1]["args"][3] == 200  # the messages sent unasked are counted


def test_a_slow_down_elsewhere_reaches_an_unlimited_process_within_the_recheck_interval(settings):
    if not settings.REDIS_URL:
        pytest.skip("without Redis the process's own state is the fleet's")
    settings.MAILSERVICE_RELAY_RATE_STEP = 0.0
    for _ in range(30):  # an observed rate to slow down from
        relay_permit()
        time.sleep(0.01)
    relay_slow_down(reply="421 4.7.0 too many messages")
    # This process heard "unlimited" just before another one got the slow-down answer.
    fleet_limits._local.unlimited_until = time.monotonic() + fleet_limits.UNLIMITED_RECHECK

    time.sleep(fleet_limits.UNLIMITED_RECHECK)
    started = time.monotonic()
    for _ in range(6):
        relay_permit()

    effective = relay_rate_status()["effective"]
    assert effective is not None and time.monotonic() - started >= 4 / effective  # spaced at the lowered rate


def test_a_slow_down_halves_the_rate_once_per_burst_and_it_climbs_back(settings):
    settings.MAILSERVICE_RELAY_RATE = 40.0
    settings.MAILSERVICE_RELAY_RATE_STEP = 20.0
    relay_permit()

    relay_slow_down(reply="421 4.7.0 too many messages")
    relay_slow_down(reply="421 4.7.0 too many messages")  # the same burst: counted once

    status = relay_rate_status()
    assert 20 <= status["effective"] < 22
    assert "421 4.7.0 too many messages" in status["reason"]
    time.sleep(1.1)
    relay_permit()
    status = relay_rate_status()
    assert status["effective"] == 40.0 and status["reason"].startswith("recovered")


def test_an_unlimited_fleet_slows_down_from_the_rate_it_was_sending_at(settings):
    settings.MAILSERVICE_RELAY_RATE_STEP = 1.0
    for _ in range(30):
        relay_permit()
        time.sleep(0.01)

    relay_slow_down(reply="454 4.7.0 Throttling failure")

    effective = relay_rate_status()["effective"]
    assert effective is not None and 1 <= effective < 60


def test_the_connection_cap_holds_across_threads(settings):
    settings.MAILSERVICE_RELAY_CONNECTIONS = 2
    open_now, most = 0, 0
    lock = threading.Lock()

    def batch() -> None:
        nonlocal open_now, most
        with relay_connection_slot():
            with lock:
                open_now += 1
                most = max(most, open_now)
            time.sleep(0.1)
            with lock:
                open_now -= 1

    threads = [threading.Thread(target=batch) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert most == 2
    assert relay_rate_status()["connections_open"] in (0, None)


# --- destination holds --------------------------------------------------------------------------


def test_a_452_naming_a_destination_holds_its_domain_and_a_delivery_releases_it(settings):
    settings.MAILSERVICE_DESTINATION_BACKOFF_BASE = 30
    holds = BatchHolds(["a@busy.example", "b@calm.example"])
    refused = SendResult(final=Reply(452, "4.2.2 Mailbox full"), refused={"a@busy.example": Reply(452, "4.2.2 full")})

    until = holds.observe(refused, ["a@busy.example"])

    assert until is not None and 25 < (until - timezone.now()).total_seconds() <= 30
    assert holds.held_until(["x@Busy.example"]) is not None
    assert holds.held_until(["b@calm.example"]) is None
    assert list(held_destinations()) == ["busy.example"]
    # another batch sees it; a delivery there once the hold is over ends the streak
    later = BatchHolds(["c@busy.example"])
    assert later.held_until(["c@busy.example"]) is not None
    later.holds["busy.example"].until = 0
    later.observe(SendResult(final=Reply(250, "OK"), accepted=["c@busy.example"]), ["c@busy.example"])
    assert held_destinations() == {} and BatchHolds(["c@busy.example"]).holds == {}


def test_repeated_temporary_failures_of_one_domain_hold_it_after_three():
    holds = BatchHolds([])
    failed = SendResult(final=Reply(450, "4.2.0 try later"), accepted=["a@slow.example"])

    assert holds.observe(failed, ["a@slow.example"]) is None
    assert holds.observe(failed, ["a@slow.example"]) is None
    assert holds.observe(failed, ["a@slow.example"]) is not None
    assert "slow.example" in held_destinations()


# --- dispatch in-process against a real SMTP server ---------------------------------------------


@pytest.fixture
def sink(settings):
    with smtp_sink() as sink:
        settings.EMAIL_URL = sink.url
        yield sink


def test_a_slow_down_answer_puts_the_batch_back_without_using_attempts(sink, settings):
    settings.MAILSERVICE_DISPATCH_BATCH_SIZE = 3
    settings.MAILSERVICE_RELAY_RATE = 100.0
    messages = queue(DomainFactory(), 3)
    sink.behaviour.data_replies = ["421 4.7.0 Too many messages, closing"]
    follow_ups = []

    assert dispatch_batch(on_slow_down=lambda: follow_ups.append(1)) == 1

    assert follow_ups == [1] and sink.received == []
    throttled, *rest = (Message.objects.get(pk=m.pk) for m in messages)
    assert (throttled.status, throttled.attempts, throttled.lease_expires_at) == (Status.ACCEPTED, 0, None)
    assert throttled.next_attempt_at <= timezone.now()
    [event] = throttled.events.all()
    assert event.type == EventType.HELD and "no attempt used" in event.detail and "421 4.7.0" in event.detail
    assert [(m.attempts, m.lease_expires_at) for m in rest] == [(0, None), (0, None)]
    assert "421 4.7.0" in relay_rate_status()["reason"]
    # the relay closed the connection: the next batch opens a new one and sends all three, once each
    assert dispatch_batch() == 3
    assert len({received.data for received in sink.received}) == 3


def test_a_deferred_destination_holds_the_rest_of_its_mail_while_others_go(sink, settings):
    settings.MAILSERVICE_DESTINATION_BACKOFF_BASE = 60
    domain = DomainFactory()
    [refused] = queue(domain, 1, to=["a@busy.example"])
    [held] = queue(domain, 1, to=["b@busy.example"])
    [other] = queue(domain, 1, to=["c@calm.example"])
    sink.behaviour.rejected_rcpts = {"a@busy.example": "452 4.2.2 Mailbox busy"}

    dispatch_batch()

    refused, held, other = (Message.objects.get(pk=m.pk) for m in (refused, held, other))
    assert other.status == Status.DELIVERED
    assert [r.rcpt_tos for r in sink.received] == [["c@calm.example"]]
    assert (refused.status, refused.attempts) == (Status.ACCEPTED, 1)
    assert (held.status, held.attempts) == (Status.ACCEPTED, 0)
    assert abs((held.next_attempt_at - refused.next_attempt_at).total_seconds()) < 1
    assert 55 < (held.next_attempt_at - timezone.now()).total_seconds() <= 60
    assert "busy.example is held" in held.events.get().detail

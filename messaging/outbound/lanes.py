"""Direct delivery's lanes: a batch is sent in a lane per destination, so one slow receiver holds up no other.

Each lane is a thread with a connection of its own (`_run_lane`) that sends its destination's messages
of the batch and reports each outcome as it comes; the database is left to the batch's thread, which
records the reports and renews the batch's leases (messaging/outbound/leases.py, LANE_LEASE_STALENESS).
A lane whose message in flight has taken SLOW_LANE_SECONDS marks its destinations slow: until it ends,
later batches of the process put their messages for them back (no attempt used, due again after
SLOW_RETRY_SECONDS) instead of holding a thread of theirs too. Once no lane has reported for
LANE_QUIET_SECONDS the batch's thread hands what is left to the process's slow-lane recorder
(`_SlowLanes`) and goes on to the next batch.

Shared state: the process's running lanes (`_lanes`) and slow-lane recorder, in memory only. A lane
that fails leaves its messages to go back once their leases end.
"""

import logging
import queue
import smtplib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from messaging.models import (
    Message,
    TlsSessionCount,
)
from messaging.outbound.attempt import Batch, LazyRelay, send_one, wire_addresses
from messaging.outbound.leases import LEASE_CHECK_SECONDS, LeaseSet
from messaging.outbound.outcomes import PartlySent, SendOutcome, connection_failed, not_sent, record_attempt
from messaging.tls_reports.counts import deferred_counts, record_deferred

logger = logging.getLogger(__name__)
# A lane whose message in flight has taken this long marks its destinations slow: until it ends,
# later batches put their messages for them back (no attempt used) instead of holding a thread of
# theirs too.
SLOW_LANE_SECONDS = 2.0
SLOW_RETRY_SECONDS = 10.0  # when a message put back for a slow destination is due again
# A batch's thread leaves its lanes to the process's slow-lane recorder once none has reported for
# this long (a healthy destination answers in milliseconds) and goes on to the next batch.
LANE_QUIET_SECONDS = 0.5


def _destinations(message: Message) -> frozenset[str]:
    return frozenset(address.rpartition("@")[2].lower() for address in wire_addresses(message))


@dataclass
class _Lane:
    destinations: frozenset[str]
    progressed_at: float  # time.monotonic() when it began, or when its last message was done

    def progressed(self) -> None:
        self.progressed_at = time.monotonic()


class _Lanes:
    """The lanes this process is running, for `slow`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: list[_Lane] = []

    @contextmanager
    def running(self, destinations: frozenset[str]) -> Iterator[_Lane]:
        lane = _Lane(destinations, time.monotonic())
        with self._lock:
            self._running.append(lane)
        try:
            yield lane
        finally:
            with self._lock:
                self._running.remove(lane)

    def slow(self, destinations: frozenset[str]) -> str:
        """A destination of these whose lane has had a message in flight for SLOW_LANE_SECONDS; "" when none."""
        now = time.monotonic()
        with self._lock:
            for lane in self._running:
                if now - lane.progressed_at >= SLOW_LANE_SECONDS and (slow := lane.destinations & destinations):
                    return min(slow)
        return ""


_lanes = _Lanes()


@dataclass
class _LaneReport:
    """What a lane hands the batch's thread: a message's outcome (None: no longer ours), or messages it
    did not try (to give back)."""

    message: Message | None = None
    outcome: SendOutcome | None = None
    untried: list[Message] = field(default_factory=list)
    tls_counts: list[TlsSessionCount] = field(default_factory=list)  # the TLS-RPT counts of its sessions so far


def _run_lane(destinations: frozenset[str], messages: list[Message], batch: Batch, reports: queue.Queue) -> None:
    """Send one destination's messages of the batch over a connection of the lane's own, reporting each
    outcome as it comes; the database is left to the batch's thread."""
    try:
        with _lanes.running(destinations) as running, LazyRelay() as relay, deferred_counts() as counts:

            def report(done: _LaneReport) -> None:
                done.tls_counts, counts[:] = counts[:], []
                reports.put(done)

            lane = replace(batch, relay=relay, in_lane=True)
            for number, message in enumerate(messages):
                try:
                    outcome = send_one(message, lane)
                except (OSError, smtplib.SMTPException, PartlySent) as exc:
                    outcome = connection_failed(message, exc)
                    report(_LaneReport(message, outcome, untried=messages[number + 1 :]))
                    return
                except Exception:  # as a batch that fails: this message goes back once its lease ends
                    logger.exception("dispatch: a lane failed; %s goes back once its lease ends", message.public_id)
                    report(_LaneReport(message, None, untried=messages[number + 1 :]))
                    return
                running.progressed()
                if outcome is None and lane.leases.holds(message):  # no recent renewal: given back untried
                    report(_LaneReport(untried=[message]))
                    continue
                untried = messages[number + 1 :] if outcome is not None and outcome.slow_down else []
                report(_LaneReport(message, outcome, untried))
                if untried:
                    return
    finally:
        connection.close()  # a lane never queries; should it have, its connection is not left open


def send_in_lanes(messages: list[Message], leases: LeaseSet, *, on_slow_down: Callable[[], None] | None) -> int:
    """Direct delivery: each destination's messages in a lane (thread) of its own, at most
    MAILSERVICE_MX_PARALLEL_DESTINATIONS at once, so a slow destination delays only its own messages.
    This thread renews the leases meanwhile and records each outcome as it comes; once the lanes go
    quiet (LANE_QUIET_SECONDS) it leaves those still running to the slow-lane recorder and returns,
    counting their messages as recorded."""
    batch = Batch.read(messages, leases, LazyRelay())
    by_destination: dict[frozenset[str], list[Message]] = {}
    recorded = 0
    for message in messages:
        destinations = _destinations(message)
        if slow := _lanes.slow(destinations):
            why = f"{slow} is slow: a message of this worker has been in flight to it for over {SLOW_LANE_SECONDS:g} s"
            retry_at = timezone.now() + timedelta(seconds=SLOW_RETRY_SECONDS)
            recorded += record_attempt(message, not_sent(message, retry_at=retry_at, why=why))
            leases.settle(message)
        else:
            by_destination.setdefault(destinations, []).append(message)
    if not by_destination:
        return recorded
    reports: queue.Queue[_LaneReport] = queue.Queue()
    workers = min(len(by_destination), max(1, settings.MAILSERVICE_MX_PARALLEL_DESTINATIONS))
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dispatch-lane")
    for destinations, lane in by_destination.items():
        pool.submit(_run_lane, destinations, lane, batch, reports)
    pool.shutdown(wait=False)  # its threads end with their lanes
    pending = sum(len(lane) for lane in by_destination.values())
    collect = _LaneCollector(leases, reports, pending, on_slow_down)
    recorded += collect.until(quiet=LANE_QUIET_SECONDS)
    if collect.pending:
        _slow_lanes.take(collect)
    # Those left to the recorder count as recorded: in progress, not given back, so the loop claims on.
    return recorded + collect.pending


@dataclass
class _LaneCollector:
    """Records the lanes' outcomes and renews the leases of the messages they have not reported yet."""

    leases: LeaseSet
    reports: queue.Queue
    pending: int
    on_slow_down: Callable[[], None] | None
    followed_up: bool = False  # one follow-up batch per batch: one per message put back flooded the queue

    def until(self, *, quiet: float) -> int:
        """Record reports until none is pending, or none has come for `quiet` seconds."""
        recorded, last = 0, time.monotonic()
        while self.pending and time.monotonic() - last < quiet:
            self.leases.renew_if_stale()
            try:
                report = self.reports.get(timeout=LEASE_CHECK_SECONDS / 4)
            except queue.Empty:
                continue
            recorded, last = recorded + self._take(report), time.monotonic()
        return recorded

    def step(self) -> None:
        """Renew the leases if due and record the reports that have come, without waiting."""
        self.leases.renew_if_stale()
        while self.pending:
            try:
                report = self.reports.get_nowait()
            except queue.Empty:
                return
            self._take(report)

    def _take(self, report: _LaneReport) -> int:
        recorded = 0
        record_deferred(report.tls_counts)
        if report.message is not None:
            self.pending -= 1
            if report.outcome is not None:
                recorded = record_attempt(report.message, report.outcome)
                self.leases.settle(report.message)
                # A slow-down, or a destination's limit that put it back until within seconds: picked up again.
                put_back = report.outcome.slow_down or report.outcome.follow_up
                if put_back and self.on_slow_down is not None and not self.followed_up:
                    self.followed_up = True
                    self.on_slow_down()
        if report.untried:
            self.pending -= len(report.untried)
            self.leases.release(report.untried)
        return recorded


class _SlowLanes:
    """One thread a process (and one database connection) recording the lanes that batches left
    running: their outcomes as they come, and their leases renewed meanwhile."""

    POLL_SECONDS = 0.1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._collectors: list[_LaneCollector] = []
        self._thread: threading.Thread | None = None

    def take(self, collector: _LaneCollector) -> None:
        with self._lock:
            self._collectors.append(collector)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="dispatch-slow-lanes", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                collectors = list(self._collectors)
                if not collectors:
                    self._thread = None
                    connection.close()
                    return
            for collector in collectors:
                try:
                    collector.step()
                except Exception:
                    logger.exception("dispatch: recording a slow lane failed; its messages return after their lease")
                    collector.pending = 0
            with self._lock:
                self._collectors = [c for c in self._collectors if c.pending]
            time.sleep(self.POLL_SECONDS)


_slow_lanes = _SlowLanes()

"""Outbound dispatch: claim accepted messages, hand them to the transport, record the outcome.

Exactly once in practice: a message is claimed by one conditional UPDATE that sets a lease
(`lease_expires_at`) and counts the attempt; nobody else can claim it until the lease runs out. The
lease value doubles as the claimer's fencing token, checked before each message goes to SMTP
(messaging/outbound/leases.py) and by the write that records its outcome (outcomes.py). No transaction
is open during an SMTP conversation.

A temporary failure (4xx, connection error, timeout) schedules the next attempt with exponential
backoff and jitter in `next_attempt_at`; the sweeper (`dispatch_sweep`) re-enqueues messages
that are due, and messages whose first task was lost (broker down at send time, worker killed).

The loop: `dispatch_batch` claims a batch, shared between domains in turn (fairness.py), and
`send_batch` sends it: over one relay connection, each message's attempt (attempt.py) recorded as it
ends, or, in direct delivery, in a lane per destination (lanes.py).
"""

import smtplib
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from domains.sending import domain_unpaused, global_paused
from messaging.models import (
    Message,
    Status,
    public_id_condition,
)
from messaging.outbound.attempt import Batch, LazyRelay, send_one
from messaging.outbound.fairness import fair_claim_ids
from messaging.outbound.lanes import send_in_lanes
from messaging.outbound.leases import BatchLease, LeaseSet
from messaging.outbound.outcomes import PartlySent, connection_failed, record_attempt
from messaging.outbound.transports import is_direct_delivery

# After a "slow down" answer, the batch's rest is given back and a new task picks it up this much later.
SLOW_DOWN_RETRY_SECONDS = 1.0


def _due(now: datetime) -> Q:
    lease_free = Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    return Q(status=Status.ACCEPTED, next_attempt_at__lte=now) & domain_unpaused() & lease_free


def dispatch_claim(*, public_id: str | None = None, limit: int) -> list[Message]:
    """Lease up to `limit` due messages (`public_id` first, then the domains in turn: messaging/outbound/fairness.py)
    to this worker; nothing while the global pause is on."""
    if global_paused():
        return []
    now = timezone.now()
    lease = now + timedelta(seconds=settings.MAILSERVICE_DISPATCH_LEASE_SECONDS)
    due = Message.objects.filter(_due(now))
    # FOR UPDATE OF the message rows only (not the joined domain), SKIP LOCKED: concurrent claimers
    # split the due messages between them instead of waiting or colliding.
    with transaction.atomic():
        ids: list[int] = []
        if public_id is not None:
            ids += (
                due.filter(public_id_condition(public_id))
                .select_for_update(of=("self",), skip_locked=True)
                .values_list("pk", flat=True)
            )
        ids += fair_claim_ids(due.exclude(pk__in=ids), limit=limit - len(ids))
        claimed_rows = Message.objects.filter(pk__in=ids)
        if not connection.features.has_select_for_update:
            # SQLite ignores FOR UPDATE, so the UPDATE itself must refuse a taken row. PostgreSQL holds
            # the rows locked as the SELECT found them due, so it updates by primary key alone: with
            # the condition, a backlog that autovacuum has not analyzed yet made the planner scan
            # every due row through message_pending_idx (12.7 ms a batch of 50 at a 10,000 backlog,
            # 0.24 ms of PostgreSQL's CPU per message; bench/results/before-after-round-six.md).
            claimed_rows = claimed_rows.filter(_due(now))
        claimed_rows.update(lease_expires_at=lease, attempts=F("attempts") + 1)
    claimed = {m.pk: m for m in Message.objects.filter(pk__in=ids, lease_expires_at=lease).select_related("domain")}
    return [claimed[pk] for pk in ids if pk in claimed]


@dataclass(frozen=True)
class BatchCounts:
    claimed: int  # fewer than the batch size: nothing else was due when the claim ran
    recorded: int


def dispatch_batch(*, public_id: str | None = None, on_slow_down: Callable[[], None] | None = None) -> int:
    """Claim a small batch (`public_id` first), send it over one connection; returns how many were recorded."""
    return dispatch_batch_counted(public_id=public_id, on_slow_down=on_slow_down).recorded


def dispatch_batch_counted(
    *, public_id: str | None = None, on_slow_down: Callable[[], None] | None = None
) -> BatchCounts:
    """dispatch_batch, saying how many messages it claimed as well."""
    claimed_at = time.monotonic()
    messages = dispatch_claim(public_id=public_id, limit=settings.MAILSERVICE_DISPATCH_BATCH_SIZE)
    if not messages:
        return BatchCounts(claimed=0, recorded=0)
    expires_at = messages[0].lease_expires_at
    assert expires_at is not None  # dispatch_claim sets the lease of every message it returns
    lease = BatchLease(expires_at=expires_at, checked_at=claimed_at)
    return BatchCounts(claimed=len(messages), recorded=send_batch(messages, lease, on_slow_down=on_slow_down))


def send_batch(messages: list[Message], lease: BatchLease, *, on_slow_down: Callable[[], None] | None = None) -> int:
    """Send claimed messages over one connection, checking the lease as LEASE_CHECK_SECONDS says.

    The relay connection opens only when the first message needs it. A connection-level failure
    (refused, dropped, timed out) is charged to the message being sent; the rest of the batch is
    released for the next run without using up an attempt (when it fails after some of the message's
    recipients got it, `PartlySent`, the message is recorded as it stands). So is the rest of a batch
    the relay asked to slow down in; `on_slow_down` is then called to have it picked up again, as it is
    after a batch in which a destination's limits put messages back (direct delivery).
    """
    if settings.EMAIL_URL and is_direct_delivery(settings.EMAIL_URL):
        return send_in_lanes(messages, LeaseSet(messages, lease), on_slow_down=on_slow_down)
    leases, recorded, in_flight = LeaseSet(messages, lease), 0, messages[0]
    follow_up = False
    try:
        with LazyRelay() as relay:
            batch = Batch.read(messages, leases, relay)
            for in_flight in messages:
                outcome = send_one(in_flight, batch) if leases.confirm(in_flight) else None
                if outcome is None:  # taken over or paused meanwhile: not ours to send or record
                    continue
                recorded += record_attempt(in_flight, outcome)
                leases.settle(in_flight)
                follow_up = follow_up or outcome.follow_up or outcome.slow_down
                if outcome.slow_down:  # the relay may have closed the connection too: the rest waits its turn
                    leases.release_rest()
                    break
    except (OSError, smtplib.SMTPException, PartlySent) as exc:
        outcome = connection_failed(in_flight, exc)
        recorded += record_attempt(in_flight, outcome)
        leases.settle(in_flight)
        leases.release_rest()
        follow_up = follow_up or outcome.slow_down
    if follow_up and on_slow_down is not None:
        on_slow_down()
    return recorded


def dispatch_sweep(*, enqueue: Callable[[], object]) -> int:
    """Call `enqueue` once per batch of due messages; returns how many messages are due.

    Due: a retry whose time has come (a message put back without using an attempt, see `not_sent`,
    counts as one: it has a `last_error`), or a first attempt that no worker has claimed within the
    grace period (its task was lost), and no lease held. Paused messages are not due.
    """
    if global_paused():
        return 0
    now = timezone.now()
    grace = now - timedelta(seconds=settings.MAILSERVICE_DISPATCH_SWEEP_GRACE)
    unclaimed = Q(attempts=0, next_attempt_at__lte=grace) | Q(attempts__gt=0) | ~Q(last_error="")
    due = Message.objects.filter(_due(now), unclaimed).order_by("next_attempt_at")
    count = len(due.values_list("pk", flat=True)[: settings.MAILSERVICE_DISPATCH_SWEEP_LIMIT])
    batch = settings.MAILSERVICE_DISPATCH_BATCH_SIZE
    for _ in range((count + batch - 1) // batch):
        enqueue()
    return count

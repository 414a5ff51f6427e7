"""A claimed batch's lease, kept while its messages are sent.

The claim (messaging/outbound/dispatch.py) sets `lease_expires_at` on every message of the batch, and that
value doubles as the claimer's fencing token. Before a message goes to SMTP the worker makes sure it
still holds the lease: if more than LEASE_CHECK_SECONDS have passed since the claim or the last check,
it renews the leases of the rest of the batch with one UPDATE conditional on the value it set (and on
no pause), so a worker that stalled neither sends what another worker may have claimed nor keeps
sending for long through a pause. A message found taken over or paused leaves the `LeaseSet` and is
neither sent nor recorded by this worker; a paused one is given back (`release_leases`). Nothing is
kept outside the database: a worker killed mid-batch leaves leases that simply run out.
"""

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import F
from django.utils import timezone

from domains.sending import unpaused
from messaging.models import (
    Message,
    Status,
)

# How stale the worker's knowledge of its leases (and of the pauses) may be before a message goes
# to SMTP. Far below any lease: no other worker can have claimed a message while this holds.
LEASE_CHECK_SECONDS = 1.0
# A lane (direct delivery) does not renew leases itself: it sends while the last renewal by the
# batch's thread is this recent, and waits this long at most for one before giving the message back.
LANE_LEASE_STALENESS = 5 * LEASE_CHECK_SECONDS
LANE_LEASE_WAIT = 30 * LEASE_CHECK_SECONDS


@dataclass
class BatchLease:
    """The lease on a claimed batch (one value for all its messages) and when it was last known to be held."""

    expires_at: datetime
    checked_at: float  # time.monotonic() at the claim or the last renewal, taken before it

    def stale(self) -> bool:
        interval = min(LEASE_CHECK_SECONDS, settings.MAILSERVICE_DISPATCH_LEASE_SECONDS / 4)
        return time.monotonic() - self.checked_at >= interval


def _renew_leases(messages: list[Message], lease: BatchLease) -> set[int]:
    """Renew the leases of `messages` in one UPDATE, conditional on still holding them (the fencing
    token) and on no pause; returns the ids still ours, and gives back the paused ones."""
    checked_at = time.monotonic()
    renewed = timezone.now() + timedelta(seconds=settings.MAILSERVICE_DISPATCH_LEASE_SECONDS)
    ids = [message.pk for message in messages]
    mine = Message.objects.filter(pk__in=ids, status=Status.ACCEPTED, lease_expires_at=lease.expires_at)
    held: set[int] = set()
    if mine.filter(unpaused()).update(lease_expires_at=renewed):
        held = set(Message.objects.filter(pk__in=ids, lease_expires_at=renewed).values_list("pk", flat=True))
    # Still at the old value: paused. (Another worker's claims no longer match it.)
    release_leases([message for message in messages if message.pk not in held], lease)
    lease.expires_at, lease.checked_at = renewed, checked_at
    for message in messages:
        if message.pk in held:
            message.lease_expires_at = renewed
    return held


class LeaseSet:
    """The batch's lease and the messages still held under it, in batch order: a message leaves the set
    when its outcome is recorded, or when a renewal finds it taken over or paused."""

    def __init__(self, messages: list[Message], lease: BatchLease) -> None:
        self.lease = lease
        self._held = list(messages)

    def holds(self, message: Message) -> bool:
        return any(held.pk == message.pk for held in self._held)

    def renew_if_stale(self) -> None:
        """Renew the leases of the messages still held if the last check is older than LEASE_CHECK_SECONDS."""
        if self.lease.stale():
            renewed = _renew_leases(self._held, self.lease)
            self._held = [message for message in self._held if message.pk in renewed]

    def confirm(self, message: Message) -> bool:
        """Whether `message` is still ours, after renewing the leases if the last check is stale."""
        if self.holds(message):
            self.renew_if_stale()
        return self.holds(message)

    def fresh(self, message: Message) -> bool:
        """Whether `message` is still ours by a check another thread made at most LANE_LEASE_STALENESS
        ago, waiting up to LANE_LEASE_WAIT for one: a lane's test before SMTP while the batch's thread
        (or the slow-lane recorder) renews (`send_in_lanes`). The held list is replaced, never changed
        in place, so reading it from a lane is safe."""
        deadline = time.monotonic() + LANE_LEASE_WAIT
        while self.holds(message):
            if time.monotonic() - self.lease.checked_at < LANE_LEASE_STALENESS:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(LEASE_CHECK_SECONDS / 20)
        return False

    def release(self, messages: list[Message]) -> None:
        """Give back these messages, if still held, without using up their attempt."""
        ids = {message.pk for message in messages}
        release_leases([held for held in self._held if held.pk in ids], self.lease)
        self._held = [held for held in self._held if held.pk not in ids]

    def settle(self, message: Message) -> None:
        """The message's outcome is recorded (or refused, the lease lost): it is no longer renewed or released."""
        self._held = [held for held in self._held if held.pk != message.pk]

    def release_rest(self) -> None:
        """Give back every message still held, without using up its attempt."""
        release_leases(self._held, self.lease)
        self._held = []


def release_leases(messages: list[Message], lease: BatchLease) -> None:
    """Give back claimed messages that were not sent: the attempt they were charged did not happen."""
    if messages:
        Message.objects.filter(
            pk__in=[message.pk for message in messages], status=Status.ACCEPTED, lease_expires_at=lease.expires_at
        ).update(lease_expires_at=None, attempts=F("attempts") - 1)

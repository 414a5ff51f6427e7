"""Outbound dispatch: claim accepted messages, hand them to the transport, record the outcome.

Exactly once in practice: a message is claimed by one conditional UPDATE that sets a lease
(`lease_expires_at`) and counts the attempt; nobody else can claim it until the lease runs out.
The lease value doubles as the claimer's fencing token. Before a message goes to SMTP the worker
makes sure it still holds the lease: if more than LEASE_CHECK_SECONDS have passed since the claim
or the last check, it renews the leases of the rest of the batch with one UPDATE conditional on
the value it set (and on no pause), so a worker that stalled neither sends what another worker may
have claimed nor keeps sending for long through a pause. It records each outcome with a write
conditional on the same value. No transaction is open during an SMTP conversation.

A temporary failure (4xx, connection error, timeout) schedules the next attempt with exponential
backoff and jitter in `next_attempt_at`; the sweeper (`dispatch_sweep`) re-enqueues messages
that are due, and messages whose first task was lost (broker down at send time, worker killed).

The steps: `send_batch` holds the batch's `LeaseSet` (its lease and the messages still held) and a
`LazyRelay` (one connection, opened when a message first needs it); `_send_one` takes a message through
its recipients and suppressions (`_addressees`), the sandbox (`_unsent_outcome`), rendering, the
destination holds, DKIM (`_signed`), the lease check and its SMTP transactions (`_Transactions`), whose
results `_classify` turns into a `SendOutcome`: a final status, or a retry.
"""

import logging
import queue
import random
import smtplib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import takewhile
from typing import Any, Self

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from domains.selectors import SigningKey, dkim_signing_keys
from domains.sending import domain_unpaused, global_paused, unpaused
from domains.sources import Pool, domain_pools
from mailservice import metrics
from messaging import sql
from messaging.models import (
    BounceType,
    EventRecord,
    EventType,
    Message,
    MessageEvent,
    Status,
    TlsSessionCount,
    public_id_condition,
)
from messaging.outbound.destinations import BatchHolds
from messaging.outbound.dkim import SigningKeyUnavailable, dkim_sign, stored_private_key
from messaging.outbound.envelope import Connection, Envelope, NotSent, Reply, SendResult, merged_results
from messaging.outbound.fairness import fair_claim_ids
from messaging.outbound.mime import UnsendableMessage, envelope_for, parsed_address, render_message
from messaging.outbound.relay_limits import is_slow_down, relay_connection_slot, relay_permit, relay_slow_down
from messaging.outbound.sandbox import sandbox_outcome
from messaging.outbound.smtp_client import reply_of
from messaging.outbound.submitted import submitted_rendering
from messaging.outbound.tls_reports import deferred_counts, record_deferred
from messaging.outbound.transports import is_direct_delivery, transport
from messaging.reply_causes import NO_CAUSE, Explained, explain
from messaging.suppressions import active_suppressions

logger = logging.getLogger(__name__)

RECORD_RETRY_SECONDS = 0.5
# How stale the worker's knowledge of its leases (and of the pauses) may be before a message goes
# to SMTP. Far below any lease: no other worker can have claimed a message while this holds.
LEASE_CHECK_SECONDS = 1.0
# A lane (direct delivery) does not renew leases itself: it sends while the last renewal by the
# batch's thread is this recent, and waits this long at most for one before giving the message back.
LANE_LEASE_STALENESS = 5 * LEASE_CHECK_SECONDS
LANE_LEASE_WAIT = 30 * LEASE_CHECK_SECONDS
# After a "slow down" answer, the batch's rest is given back and a new task picks it up this much later.
SLOW_DOWN_RETRY_SECONDS = 1.0
# A message put back by this many slow-down answers in a row (no attempt used each time) is charged
# the next one, with the backoff: a receiver that keeps throttling cannot keep it in a fast loop.
FREE_THROTTLES = 10
# Each free put-back after the first waits longer (0.25 s, doubling, at most 5 s): a relay at its
# connection limit greets every new connection with 421 while its slots are busy, and retries at once
# spent all ten free throttles in two seconds (tests/messaging/test_postfix_peers.py). Ten take ~28 s.
THROTTLE_PAUSE_BASE_SECONDS = 0.25
THROTTLE_PAUSE_MAX_SECONDS = 5.0
THROTTLE_MARK = "asked to slow down"  # in the `why` of every slow-down put-back, so they can be counted
FOLLOW_UP_HORIZON = 5.0  # seconds: a message put back until no later than this gets a follow-up batch


def retry_delay(*, attempt: int) -> timedelta:
    """How long to wait after failed attempt number `attempt` (1-based): base * 2^(attempt-1), capped, plus jitter."""
    base = settings.MAILSERVICE_DISPATCH_BACKOFF_BASE * 2 ** (attempt - 1)
    capped = min(base, settings.MAILSERVICE_DISPATCH_BACKOFF_MAX)
    return timedelta(seconds=capped * (1 + random.uniform(0, settings.MAILSERVICE_DISPATCH_BACKOFF_JITTER)))


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
class SendOutcome:
    """What one attempt came to: the message's final status, or (`retry`) back to the queue for another attempt."""

    status: str  # the Status recorded: a final one, or ACCEPTED (the message stays queued) with `retry`
    events: list[EventRecord]
    last_error: str = ""
    retry: bool = False
    retry_at: datetime | None = None  # the next attempt, instead of the backoff schedule
    charged: bool = True  # False: no attempt was made after all (a hold, a slow-down): it is given back
    slow_down: bool = False  # the relay asked the fleet to slow down: stop this batch
    follow_up: bool = False  # a destination's limit put it back: a follow-up batch picks it up within seconds


def _wire_addresses(message: Message) -> list[str]:
    """The batch's recipient addresses, for reading their domains' holds (an unsendable one has none)."""
    try:
        return list(_recipients(message).values())
    except UnsendableMessage:
        return []


def _recipients(message: Message) -> dict[str, str]:
    """Envelope recipients (To, Cc, Bcc; a submission's own envelope), each address once:
    {as the suppression list keys it: as sent}.

    Both come from the one parse of each address (`Address.key`, `Address.wire`), so no spelling
    of a suppressed address reaches the relay."""
    recipients: dict[str, str] = {}
    for mailbox in message.envelope_mailboxes:
        address = parsed_address(mailbox)
        recipients.setdefault(address.key, address.wire)
    return recipients


def _retry(
    events: list[EventRecord],
    last_error: str,
    *,
    retry_at: datetime | None = None,
    charged: bool = True,
    slow_down: bool = False,
    follow_up: bool = False,
) -> SendOutcome:
    """Another attempt later (`retry_at`, else the backoff schedule): the message stays accepted."""
    return SendOutcome(
        Status.ACCEPTED,
        events,
        last_error,
        retry=True,
        retry_at=retry_at,
        charged=charged,
        slow_down=slow_down,
        follow_up=follow_up,
    )


def _explained(reply: Reply | None) -> Explained:
    """Why the receiver refused or deferred, from `reply`'s codes (messaging/reply_causes.py)."""
    return NO_CAUSE if reply is None else explain(reply.code, reply.enhanced_status, reply.text)


def _reply_event(
    kind: str,
    recipient: str,
    reply: Reply,
    *,
    domain: str,
    detail: str | None = None,
    bounce: bool = False,
    host: str = "",
) -> EventRecord:
    """An event about the relay's `reply`, its parts recorded as fields; its detail is the reply itself unless
    given, with the failure's cause (and for an authentication refusal, the check of `domain` to fix).
    A bounce is soft when its enhanced status (else its reply code) is a 4xx one: decided here, once."""
    bounce_type = ""
    if bounce:
        bounce_type = BounceType.SOFT if (reply.enhanced_status or str(reply.code)).startswith("4") else BounceType.HARD
    explained = _explained(reply)
    return EventRecord(
        kind,
        recipient,
        f"{reply if detail is None else detail}{explained.note(domain)}",
        smtp_code=reply.code,
        enhanced_status=reply.enhanced_status,
        diagnostic=reply.text,
        bounce_type=bounce_type,
        remote_host=host or transport().host,
        cause=explained.cause,
        fix_check=explained.check,
    )


def _temporary(message: Message, error: str, reply: Reply | None = None) -> SendOutcome:
    """Retry later, or give up once the attempts are used up; `reply`: the relay's answer behind `error`, if any."""
    if message.attempts >= settings.MAILSERVICE_DISPATCH_MAX_ATTEMPTS:
        kind, detail = EventType.FAILED, f"attempt {message.attempts}, giving up: {error}"
    else:
        kind, detail = EventType.DEFERRED, f"attempt {message.attempts}: {error}"
    if reply is None:
        event = EventRecord(kind, "", detail)
    else:
        event = _reply_event(kind, "", reply, domain=message.domain.name, detail=detail)
    if kind == EventType.FAILED:
        return SendOutcome(Status.FAILED, [event], error)
    return _retry([event], error)


def _classify(message: Message, result: SendResult) -> SendOutcome:
    domain = message.domain.name
    rejected = [
        _reply_event(EventType.RECIPIENT_REJECTED, rcpt, reply, domain=domain, bounce=True, host=result.remote_host)
        for rcpt, reply in result.refused.items()
    ]
    if result.delivered:
        delivered = _reply_event(EventType.DELIVERED, "", result.final, domain=domain, host=result.remote_host)
        return SendOutcome(Status.DELIVERED, [*rejected, delivered])
    replies = [result.final] if result.accepted or not result.refused else list(result.refused.values())
    if all(reply.code >= 500 and reply.local for reply in replies):
        # No server refused it: the service found it cannot be delivered (a null MX, no such domain).
        failed = _reply_event(EventType.FAILED, "", result.final, domain=domain, host=result.remote_host)
        return SendOutcome(Status.FAILED, [*rejected, failed], failed.detail)
    if all(reply.code >= 500 for reply in replies):
        bounced = _reply_event(EventType.BOUNCED, "", result.final, domain=domain, bounce=True, host=result.remote_host)
        return SendOutcome(Status.BOUNCED, [*rejected, bounced], bounced.detail)
    return _temporary(message, str(result.final), result.final)


def _suppressed(messages: list[Message]) -> set[tuple[int, str]]:
    """(domain id, address) for the batch's recipients on their domain's suppression list.

    One query per batch rather than per message: a suppression added while a batch is being
    sent applies from the next batch, a second or so later."""
    addresses: set[str] = set()
    for message in messages:
        with suppress(UnsendableMessage):  # _send_one fails such a message itself
            addresses.update(_recipients(message))
    if not addresses:
        return set()
    listed = active_suppressions().filter(domain_id__in={m.domain_id for m in messages}, address__in=addresses)
    return set(listed.values_list("domain_id", "address"))


def _record(message: Message, outcome: SendOutcome, now: datetime) -> bool:
    """Write the outcome if this worker still holds the lease; False if it lost it."""
    fields: dict = {"status": outcome.status, "last_error": outcome.last_error, "lease_expires_at": None}
    fields["next_attempt_at"] = (
        (outcome.retry_at or now + retry_delay(attempt=message.attempts)) if outcome.retry else None
    )
    if not outcome.charged:
        fields["attempts"] = message.attempts - 1
    if message.message_id_header:
        fields["message_id_header"] = message.message_id_header
    if sql.available() and outcome.events:  # the one statement needs an event row to insert
        return sql.dispatch_record_in_one_statement(message, fields, outcome.events, now)
    with transaction.atomic():
        mine = Message.objects.filter(
            pk=message.pk,
            created_at=message.created_at,  # the day partition, as in sql.dispatch_record_in_one_statement
            status=Status.ACCEPTED,
            lease_expires_at=message.lease_expires_at,
        )
        if mine.update(**fields, updated_at=now) != 1:
            return False
        MessageEvent.objects.bulk_create(event.row(message) for event in outcome.events)
    return True


def _record_durably(message: Message, outcome: SendOutcome) -> bool:
    """`_record`, retried across a database outage for as long as a lease lasts.

    The message may already be at the relay: giving up here would leave it leased and `accepted`,
    and once the lease ran out it would be claimed and sent again. Retrying is safe because the
    write is fenced by the lease value: if another worker claimed the message meanwhile, it is refused.
    """
    deadline = time.monotonic() + settings.MAILSERVICE_DISPATCH_LEASE_SECONDS
    while True:
        try:
            return _record(message, outcome, timezone.now())
        except (OperationalError, InterfaceError) as exc:
            if time.monotonic() >= deadline:
                raise
            logger.warning("recording the outcome of %s: database unavailable, retrying: %s", message.public_id, exc)
            connection.close()  # a connection the server cut is not reused
            time.sleep(RECORD_RETRY_SECONDS)


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
    _release([message for message in messages if message.pk not in held], lease)
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
        (or the slow-lane recorder) renews (`_send_in_lanes`). The held list is replaced, never changed
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
        _release([held for held in self._held if held.pk in ids], self.lease)
        self._held = [held for held in self._held if held.pk not in ids]

    def settle(self, message: Message) -> None:
        """The message's outcome is recorded (or refused, the lease lost): it is no longer renewed or released."""
        self._held = [held for held in self._held if held.pk != message.pk]

    def release_rest(self) -> None:
        """Give back every message still held, without using up its attempt."""
        _release(self._held, self.lease)
        self._held = []


class LazyRelay:
    """The batch's relay connection: opened on first use, holding one of the fleet's relay connection
    slots, and closed (the slot given back) when the batch ends."""

    def __init__(self) -> None:
        self._stack = ExitStack()
        self._connection: Connection | None = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: Any) -> bool | None:
        return self._stack.__exit__(*exc_info)

    def send(self, *, envelope: Envelope, data: bytes, name: str) -> SendResult:
        if self._connection is None:
            self._stack.enter_context(relay_connection_slot())
            self._connection = self._stack.enter_context(transport().connection())
        return self._connection.send(envelope=envelope, data=data, name=name)


@dataclass
class _Batch:
    """What each message of a batch is sent with: read once per batch, and its one relay connection."""

    leases: LeaseSet
    relay: LazyRelay
    suppressed: set[tuple[int, str]]
    signing_keys: dict[int, SigningKey]
    holds: BatchHolds
    pools: dict[int, Pool]  # direct delivery's source addresses per domain ({}: the system chooses)
    in_lane: bool = False  # sent in a lane: the batch's thread renews the leases (`_send_in_lanes`)

    @classmethod
    def read(cls, messages: list[Message], leases: LeaseSet, relay: LazyRelay) -> Self:
        return cls(
            leases=leases,
            relay=relay,
            suppressed=_suppressed(messages),
            signing_keys=dkim_signing_keys(domain_ids={message.domain_id for message in messages}),
            holds=BatchHolds(address for message in messages for address in _wire_addresses(message)),
            pools=domain_pools(domain_ids={message.domain_id for message in messages}),
        )

    def cleared(self, message: Message) -> bool:
        """A permit from the relay's rate (it may wait), then the lease check, right before SMTP.
        Direct delivery asks each destination's rate instead (messaging/outbound/shaping.py)."""
        _relay_permit()
        return self.leases.fresh(message) if self.in_lane else self.leases.confirm(message)


def _relay_permit() -> None:
    if not is_direct_delivery(settings.EMAIL_URL or ""):
        relay_permit()


def _not_sent(
    message: Message,
    *,
    retry_at: datetime,
    why: str,
    slow_down: bool = False,
    follow_up: bool = False,
    reply: Reply | None = None,
) -> SendOutcome:
    """Put a claimed message back until `retry_at` without using an attempt: held, or the relay or a
    destination asked to slow down (or is at its limits) with `reply`, whose cause the event carries."""
    explained = _explained(reply)
    note = explained.note(message.domain.name)
    detail = f"not sent, no attempt used: {why}; next try at {retry_at:%H:%M:%S} UTC{note}"
    event = EventRecord(EventType.DEFERRED, "", detail, cause=explained.cause, fix_check=explained.check)
    return _retry([event], why, retry_at=retry_at, charged=False, slow_down=slow_down, follow_up=follow_up)


def _throttles_in_a_row(message: Message) -> int:
    """How many of the message's latest events are slow-down put-backs (up to FREE_THROTTLES)."""
    recent = message.events.order_by("-pk").values_list("type", "detail")[:FREE_THROTTLES]
    return len(list(takewhile(lambda event: event[0] == EventType.DEFERRED and THROTTLE_MARK in event[1], recent)))


def _slowed_down(message: Message, why: str, *, reply: Reply, retry_at: datetime, relay: bool) -> SendOutcome:
    """A slow-down answer (`reply`): put back without using an attempt, unless FREE_THROTTLES in a row already
    were; then the attempt counts (and the backoff applies). `relay`: the batch stops (the relay's rate fell)."""
    in_a_row = _throttles_in_a_row(message)
    if in_a_row >= FREE_THROTTLES:
        charged = _temporary(message, f"{why} ({FREE_THROTTLES} times in a row without using an attempt)", reply)
        return replace(charged, slow_down=relay)
    retry_at += _throttle_pause(in_a_row)
    return _not_sent(message, retry_at=retry_at, why=why, slow_down=relay, follow_up=not relay, reply=reply)


def _throttle_pause(in_a_row: int) -> timedelta:
    """How much later than asked a message put back by `in_a_row` slow-downs before this one is retried."""
    if in_a_row == 0:
        return timedelta(0)
    seconds = THROTTLE_PAUSE_BASE_SECONDS * 2 ** (in_a_row - 1)
    return timedelta(seconds=min(seconds, THROTTLE_PAUSE_MAX_SECONDS))


def _destination_limited(message: Message, refusal: NotSent, reply: Reply) -> SendOutcome:
    """Direct delivery held the message back untried: a destination's limit (connection cap, rate, a
    slow-down answer: `reply`) or its pool's warm-up caps. A follow-up batch comes for what is due within seconds."""
    if refusal.throttle:
        return _slowed_down(message, refusal.why, reply=reply, retry_at=refusal.until, relay=False)
    soon = refusal.until - timezone.now() <= timedelta(seconds=FOLLOW_UP_HORIZON)
    return _not_sent(message, retry_at=refusal.until, why=refusal.why, follow_up=soon)


class PartlySent(Exception):
    """The relay connection failed after some of a message's recipients got it: `outcome` records them
    as delivered and the rest as not sent (sending the message again would deliver it twice)."""

    def __init__(self, outcome: SendOutcome, error: str) -> None:
        super().__init__(error)
        self.outcome = outcome


def _transactions(recipients: dict[str, str], wire: list[str]) -> list[tuple[int | None, list[str]]]:
    """(recipient index for the return path, RCPT TO addresses) of each SMTP transaction.

    With a return-path domain, one transaction per recipient, each with its own signed return path
    (messaging.verp) so that a bounce proves which recipient it is about; the index is the
    recipient's place among all of the message's recipients, suppressed ones included, as inbound
    counts them. Without one, bounces come back to the sender: one transaction for all."""
    if not settings.MAILSERVICE_RETURN_PATH_DOMAIN:
        return [(None, wire)]
    index = {sent: position for position, sent in enumerate(recipients.values())}
    return [(index[address], [address]) for address in wire]


@dataclass(frozen=True)
class _Addressees:
    """A message's envelope recipients, split by the domain's suppression list."""

    recipients: dict[str, str]  # every recipient: {as the suppression list keys it: as sent}
    wire: list[str]  # the ones it is sent to
    skipped: Sequence[EventRecord]  # a `suppressed` event for each of the others


def _addressees(message: Message, suppressed_in_batch: set[tuple[int, str]]) -> _Addressees:
    recipients = _recipients(message)
    suppressed = {address for domain_id, address in suppressed_in_batch if domain_id == message.domain_id}
    notice = "the address is on the domain's suppression list"
    skipped = [EventRecord(EventType.SUPPRESSED, address, notice) for address in recipients if address in suppressed]
    wire = [sent for address, sent in recipients.items() if address not in suppressed]
    return _Addressees(recipients, wire, skipped)


def _unsent_outcome(message: Message, addressees: _Addressees) -> SendOutcome | None:
    """The outcome of a message that never reaches SMTP: every recipient suppressed, or a test key's (the sandbox)."""
    skipped = addressees.skipped
    if not addressees.wire:
        error = "every recipient is on the suppression list"
        return SendOutcome(Status.FAILED, [*skipped, EventRecord(EventType.FAILED, "", error)], error)
    if message.is_test:
        status, events = sandbox_outcome(recipients=addressees.wire)
        return SendOutcome(status, [*skipped, *events])
    return None


def _envelopes(message: Message, addressees: _Addressees, pool: Pool | None) -> list[tuple[list[str], Envelope]]:
    """(RCPT TO addresses, envelope) of each SMTP transaction the message takes (`_transactions`), each
    leaving from an address of its domain's `pool` (direct delivery)."""
    return [
        (
            addresses,
            replace(
                envelope_for(
                    message=message,
                    recipients=addresses,
                    return_path_domain=settings.MAILSERVICE_RETURN_PATH_DOMAIN,
                    recipient_index=index,
                ),
                pool=pool,
            ),
        )
        for index, addresses in _transactions(addressees.recipients, addressees.wire)
    ]


def _signed(message: Message, data: bytes, signing_keys: dict[int, SigningKey]) -> bytes:
    """The rendered message with its domain's DKIM signature; SigningKeyUnavailable without a usable key."""
    # Only a domain's active key signs: a rotated-in key becomes active once its record is found.
    key = signing_keys.get(message.domain_id)
    if key is None:
        raise SigningKeyUnavailable("the domain has no active DKIM key")
    private_key = stored_private_key(key)
    return dkim_sign(data=data, domain=message.domain.name, selector=key.selector, private_key=private_key)


@dataclass
class _Transactions:
    """A message's SMTP transactions (`_transactions`), one after the other over the batch's connection with
    the same signed data; a 421 or a slow-down answer ends them, the recipients left are refused with it."""

    message: Message
    envelopes: list[tuple[list[str], Envelope]]
    data: bytes
    batch: _Batch
    skipped: Sequence[EventRecord]
    results: list[tuple[list[str], SendResult]] = field(default_factory=list)  # RCPT TO addresses, result
    hold_ends: list[datetime] = field(default_factory=list)  # the destination holds they started
    slow_down: bool = False  # the relay asked the fleet to slow down

    def run(self) -> SendOutcome:
        for number, (addresses, _) in enumerate(self.envelopes):
            if number:
                # The relay counts each transaction as a message. The lease checked by `cleared()` is not
                # asked again: once a recipient has the message the rest follow, within the lease.
                _relay_permit()
            result = self._send(number)
            self.results.append((addresses, result))
            # Held back (a pool's warm-up caps, a destination's limits): a transaction that follows one
            # already begun waits rather than being held back, so this is normally the first.
            if result.not_sent is not None and not self._delivered_any():
                return _destination_limited(self.message, result.not_sent, result.final)
            if result.not_sent is None and is_slow_down(result.final) and not result.delivered:
                relay_slow_down(reply=str(result.final))
                if not self._delivered_any():
                    # Due again at once: the lowered shared rate spaces the next tries, whichever worker makes them.
                    why = f"the relay {THROTTLE_MARK}: {result.final}"
                    return _slowed_down(self.message, why, reply=result.final, retry_at=timezone.now(), relay=True)
                self.slow_down = True
            if (hold_end := self.batch.holds.observe(result, addresses)) is not None:
                self.hold_ends.append(hold_end)
            if self.slow_down or result.final.code == 421:
                self.results += [(rest, SendResult(final=result.final)) for rest, _ in self.envelopes[number + 1 :]]
                break
        return self._outcome()

    def _delivered_any(self) -> bool:
        return any(result.delivered for _, result in self.results)

    def _send(self, number: int) -> SendResult:
        """Transaction `number`; PartlySent if the connection fails after an earlier one delivered."""
        message, envelope = self.message, self.envelopes[number][1]
        # Once a transaction of the message was begun the others follow, whatever the warm-up caps.
        envelope = replace(envelope, follows=number > 0)
        name = message.public_id if len(self.envelopes) == 1 else f"{message.public_id}.{number}"
        try:
            result = self.batch.relay.send(envelope=envelope, data=self.data, name=name)
        except (OSError, smtplib.SMTPException) as exc:
            if not self._delivered_any():
                raise  # nobody has it yet: the whole message is tried again
            unsent = [address for rest, _ in self.envelopes[number:] for address in rest]
            raise self._partly_sent(unsent, _error_text(exc)) from exc
        if result.not_sent is None:  # else no server was asked: the reply is the pool's, synthesized
            metrics.RELAY_REPLIES.labels(reply_class=metrics.reply_class(result.final.code)).inc()
        return result

    def _partly_sent(self, unsent: list[str], error: str) -> PartlySent:
        outcome = _classify(self.message, merged_results(self.results))
        detail = f"not sent, the relay connection failed: {error}"
        # Never retried (the others have it): a hard bounce for these recipients, as the webhook says.
        lost = [
            EventRecord(EventType.RECIPIENT_REJECTED, address, detail, diagnostic=detail, bounce_type=BounceType.HARD)
            for address in unsent
        ]
        return PartlySent(replace(outcome, events=[*self.skipped, *outcome.events, *lost]), error)

    def _outcome(self) -> SendOutcome:
        """The message's outcome from the results; a retry waits for the destination holds they started."""
        outcome = _classify(self.message, merged_results(self.results))
        retry_at = max(self.hold_ends) if self.hold_ends and outcome.retry else None
        events = [*self.skipped, *outcome.events]
        return replace(outcome, events=events, retry_at=retry_at, slow_down=self.slow_down)


def _send_one(message: Message, batch: _Batch) -> SendOutcome | None:
    """Deliver one claimed message whose lease the worker holds, within the relay's limits.

    `batch.cleared()` is asked right before SMTP (it may wait for the relay's rate): None if it says
    the lease is no longer held."""
    try:
        addressees = _addressees(message, batch.suppressed)
        if unsent := _unsent_outcome(message, addressees):
            return unsent
        rendered = submitted_rendering(message) if message.submitted else render_message(message)
        envelopes = _envelopes(message, addressees, batch.pools.get(message.domain_id))
    except UnsendableMessage as exc:
        return SendOutcome(Status.FAILED, [EventRecord(EventType.FAILED, "", str(exc))], str(exc))
    if held := batch.holds.held_until(addressees.wire):
        return _not_sent(message, retry_at=held[0], why=held[1])
    message.message_id_header = rendered.message_id
    try:
        signed = _signed(message, rendered.data, batch.signing_keys)
    except SigningKeyUnavailable as exc:
        return _temporary(message, f"not signed, not sent: {exc}")
    if not batch.cleared(message):
        return None
    return _Transactions(message, envelopes, signed, batch, addressees.skipped).run()


def _log_outcome(message: Message, outcome: SendOutcome) -> None:
    """One line per attempt: its result (a retry is `accepted`) and the relay's last error, if any."""
    context = {"message_id": message.public_id, "domain": message.domain.name}
    detail = f" ({outcome.last_error})" if outcome.last_error else ""
    logger.info("dispatch: %s%s", outcome.status, detail, extra=context)


def _release(messages: list[Message], lease: BatchLease) -> None:
    """Give back claimed messages that were not sent: the attempt they were charged did not happen."""
    if messages:
        Message.objects.filter(
            pk__in=[message.pk for message in messages], status=Status.ACCEPTED, lease_expires_at=lease.expires_at
        ).update(lease_expires_at=None, attempts=F("attempts") - 1)


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


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _connection_failed(message: Message, exc: OSError | smtplib.SMTPException | PartlySent) -> SendOutcome:
    """The outcome of the message in flight when the relay connection failed, and the fleet's slow-down
    when the relay refused the connection at its cap. A slow-down answer at connect or greeting (421)
    costs no attempt: the message was not sent, and is due again at once at the lowered rate."""
    error = str(exc) if isinstance(exc, PartlySent) else _error_text(exc)
    logger.warning("dispatch of %s: the relay connection failed: %s", message.public_id, error)
    metrics.RELAY_REPLIES.labels(reply_class="connection_error").inc()
    if isinstance(exc, PartlySent):
        return exc.outcome
    reply = reply_of(exc)
    if reply is not None and is_slow_down(reply):
        relay_slow_down(reply=str(reply))
        why = f"the relay {THROTTLE_MARK} before the message: {reply}"
        return _slowed_down(message, why, reply=reply, retry_at=timezone.now(), relay=True)
    if isinstance(exc, ConnectionRefusedError):
        relay_slow_down(reply=error)  # refused at the relay's connection cap: the fleet backs off together
    return _temporary(message, error)


def _record_attempt(message: Message, outcome: SendOutcome) -> bool:
    """Record the outcome durably, counted and logged; False if the lease was lost meanwhile."""
    if not _record_durably(message, outcome):
        return False
    if not message.is_test:  # a simulated outcome is no delivery, bounce or complaint
        metrics.dispatch_recorded(domain=message.domain.name, status=outcome.status, accepted_at=message.created_at)
    _log_outcome(message, outcome)
    return True


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
        return _send_in_lanes(messages, LeaseSet(messages, lease), on_slow_down=on_slow_down)
    leases, recorded, in_flight = LeaseSet(messages, lease), 0, messages[0]
    follow_up = False
    try:
        with LazyRelay() as relay:
            batch = _Batch.read(messages, leases, relay)
            for in_flight in messages:
                outcome = _send_one(in_flight, batch) if leases.confirm(in_flight) else None
                if outcome is None:  # taken over or paused meanwhile: not ours to send or record
                    continue
                recorded += _record_attempt(in_flight, outcome)
                leases.settle(in_flight)
                follow_up = follow_up or outcome.follow_up or outcome.slow_down
                if outcome.slow_down:  # the relay may have closed the connection too: the rest waits its turn
                    leases.release_rest()
                    break
    except (OSError, smtplib.SMTPException, PartlySent) as exc:
        outcome = _connection_failed(in_flight, exc)
        recorded += _record_attempt(in_flight, outcome)
        leases.settle(in_flight)
        leases.release_rest()
        follow_up = follow_up or outcome.slow_down
    if follow_up and on_slow_down is not None:
        on_slow_down()
    return recorded


# --- direct delivery: a lane per destination ----------------------------------------------------------

# A lane whose message in flight has taken this long marks its destinations slow: until it ends,
# later batches put their messages for them back (no attempt used) instead of holding a thread of
# theirs too.
SLOW_LANE_SECONDS = 2.0
SLOW_RETRY_SECONDS = 10.0  # when a message put back for a slow destination is due again
# A batch's thread leaves its lanes to the process's slow-lane recorder once none has reported for
# this long (a healthy destination answers in milliseconds) and goes on to the next batch.
LANE_QUIET_SECONDS = 0.5


def _destinations(message: Message) -> frozenset[str]:
    return frozenset(address.rpartition("@")[2].lower() for address in _wire_addresses(message))


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


def _run_lane(destinations: frozenset[str], messages: list[Message], batch: _Batch, reports: queue.Queue) -> None:
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
                    outcome = _send_one(message, lane)
                except (OSError, smtplib.SMTPException, PartlySent) as exc:
                    outcome = _connection_failed(message, exc)
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


def _send_in_lanes(messages: list[Message], leases: LeaseSet, *, on_slow_down: Callable[[], None] | None) -> int:
    """Direct delivery: each destination's messages in a lane (thread) of its own, at most
    MAILSERVICE_MX_PARALLEL_DESTINATIONS at once, so a slow destination delays only its own messages.
    This thread renews the leases meanwhile and records each outcome as it comes; once the lanes go
    quiet (LANE_QUIET_SECONDS) it leaves those still running to the slow-lane recorder and returns,
    counting their messages as recorded."""
    batch = _Batch.read(messages, leases, LazyRelay())
    by_destination: dict[frozenset[str], list[Message]] = {}
    recorded = 0
    for message in messages:
        destinations = _destinations(message)
        if slow := _lanes.slow(destinations):
            why = f"{slow} is slow: a message of this worker has been in flight to it for over {SLOW_LANE_SECONDS:g} s"
            retry_at = timezone.now() + timedelta(seconds=SLOW_RETRY_SECONDS)
            recorded += _record_attempt(message, _not_sent(message, retry_at=retry_at, why=why))
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
                recorded = _record_attempt(report.message, report.outcome)
                self.leases.settle(report.message)
                # A slow-down, or a destination's limit that put it back until within seconds: picked up again.
                if (report.outcome.slow_down or report.outcome.follow_up) and self.on_slow_down is not None:
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


def dispatch_sweep(*, enqueue: Callable[[], object]) -> int:
    """Call `enqueue` once per batch of due messages; returns how many messages are due.

    Due: a retry whose time has come (a message put back without using an attempt, see `_not_sent`,
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

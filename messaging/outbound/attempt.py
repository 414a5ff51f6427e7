"""One message's attempt: from its recipients to the outcome of its SMTP transactions.

`send_one` takes a message through its recipients and suppressions (`_addressees`), the sandbox
(`_unsent_outcome`), rendering, the destination holds, DKIM (`_signed`), the lease check and its SMTP
transactions (`_Transactions`), whose results messaging/outbound/outcomes.py's `classify` turns into a
`SendOutcome`. What every message of a batch is sent with is read once per batch (`Batch.read`:
suppressions, signing keys, holds, source pools) and the relay connection is opened when a message
first needs it (`LazyRelay`), under the fleet's connection cap.

Nothing here writes to the database and no transaction is open during SMTP: the caller records the
outcome. A connection that fails mid-message raises (OSError, smtplib.SMTPException, or `PartlySent`
when some transactions of the message were already accepted) for the caller to record.
"""

import smtplib
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Self

from django.conf import settings
from django.utils import timezone

from domains.selectors import SigningKey, dkim_signing_keys
from mailservice import metrics
from messaging.models import (
    BounceType,
    EventRecord,
    EventType,
    Message,
    Status,
)
from messaging.outbound.direct.sources import domain_pools
from messaging.outbound.dkim import SigningKeyUnavailable, dkim_sign, stored_private_key
from messaging.outbound.domain_holds import BatchHolds
from messaging.outbound.envelope import Connection, Envelope, Pool, SendResult, envelope_for, merged_results
from messaging.outbound.fleet_limits import is_slow_down, relay_connection_slot, relay_permit, relay_slow_down
from messaging.outbound.leases import LeaseSet
from messaging.outbound.outcomes import (
    THROTTLE_MARK,
    PartlySent,
    SendOutcome,
    classify,
    destination_limited,
    error_text,
    not_sent,
    slowed_down,
    temporary,
)
from messaging.outbound.sandbox import sandbox_outcome
from messaging.outbound.transports import is_direct_delivery, transport
from messaging.rfc5322.rendering import UnsendableMessage, parsed_address, render_message
from messaging.rfc5322.submitted import submitted_rendering
from messaging.suppressions import active_suppressions


def wire_addresses(message: Message) -> list[str]:
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


def suppressed_in(messages: list[Message]) -> set[tuple[int, bool, str]]:
    """(domain id, is_test, address) for the batch's recipients on their domain's suppression list of
    their side (a test key's sends are checked against the sandbox's list only).

    One query per batch rather than per message: a suppression added while a batch is being
    sent applies from the next batch, a second or so later."""
    addresses: set[str] = set()
    for message in messages:
        with suppress(UnsendableMessage):  # send_one fails such a message itself
            addresses.update(_recipients(message))
    if not addresses:
        return set()
    listed = active_suppressions().filter(domain_id__in={m.domain_id for m in messages}, address__in=addresses)
    return set(listed.values_list("domain_id", "is_test", "address"))


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
class Batch:
    """What each message of a batch is sent with: read once per batch, and its one relay connection."""

    leases: LeaseSet
    relay: LazyRelay
    suppressed: set[tuple[int, bool, str]]
    signing_keys: dict[int, SigningKey]
    holds: BatchHolds
    pools: dict[int, Pool]  # direct delivery's source addresses per domain ({}: the system chooses)
    in_lane: bool = False  # sent in a lane: the batch's thread renews the leases (`send_in_lanes`)

    @classmethod
    def read(cls, messages: list[Message], leases: LeaseSet, relay: LazyRelay) -> Self:
        return cls(
            leases=leases,
            relay=relay,
            suppressed=suppressed_in(messages),
            signing_keys=dkim_signing_keys(domain_ids={message.domain_id for message in messages}),
            holds=BatchHolds(address for message in messages for address in wire_addresses(message)),
            pools=domain_pools(domain_ids={message.domain_id for message in messages}),
        )

    def cleared(self, message: Message) -> bool:
        """A permit from the relay's rate (it may wait), then the lease check, right before SMTP.
        Direct delivery asks each destination's rate instead (messaging/outbound/direct/destinations.py)."""
        _relay_permit()
        return self.leases.fresh(message) if self.in_lane else self.leases.confirm(message)


def _relay_permit() -> None:
    if not is_direct_delivery(settings.EMAIL_URL or ""):
        relay_permit()


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


def _addressees(message: Message, suppressed_in_batch: set[tuple[int, bool, str]]) -> _Addressees:
    recipients = _recipients(message)
    side = (message.domain_id, message.is_test)
    suppressed = {address for domain_id, is_test, address in suppressed_in_batch if (domain_id, is_test) == side}
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
    batch: Batch
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
                return destination_limited(self.message, result.not_sent, result.final)
            if result.not_sent is None and is_slow_down(result.final) and not result.delivered:
                relay_slow_down(reply=str(result.final))
                if not self._delivered_any():
                    # Due again at once: the lowered shared rate spaces the next tries, whichever worker makes them.
                    why = f"the relay {THROTTLE_MARK}: {result.final}"
                    return slowed_down(self.message, why, reply=result.final, retry_at=timezone.now(), relay=True)
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
            raise self._partly_sent(unsent, error_text(exc)) from exc
        if result.not_sent is None:  # else no server was asked: the reply is the pool's, synthesized
            metrics.RELAY_REPLIES.labels(reply_class=metrics.reply_class(result.final.code)).inc()
        return result

    def _partly_sent(self, unsent: list[str], error: str) -> PartlySent:
        outcome = classify(self.message, merged_results(self.results))
        detail = f"not sent, the relay connection failed: {error}"
        # Never retried (the others have it): a hard bounce for these recipients, as the webhook says.
        lost = [
            EventRecord(EventType.RECIPIENT_REJECTED, address, detail, diagnostic=detail, bounce_type=BounceType.HARD)
            for address in unsent
        ]
        return PartlySent(replace(outcome, events=[*self.skipped, *outcome.events, *lost]), error)

    def _outcome(self) -> SendOutcome:
        """The message's outcome from the results; a retry waits for the destination holds they started."""
        outcome = classify(self.message, merged_results(self.results))
        ends = [*self.hold_ends, *([outcome.retry_at] if outcome.retry_at else [])]  # and a greylisting's delay
        retry_at = max(ends) if ends and outcome.retry else None
        events = [*self.skipped, *outcome.events]
        return replace(outcome, events=events, retry_at=retry_at, slow_down=self.slow_down)


def send_one(message: Message, batch: Batch) -> SendOutcome | None:
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
        return not_sent(message, retry_at=held[0], why=held[1])
    message.message_id_header = rendered.message_id
    try:
        signed = _signed(message, rendered.data, batch.signing_keys)
    except SigningKeyUnavailable as exc:
        return temporary(message, f"not signed, not sent: {exc}")
    if not batch.cleared(message):
        return None
    return _Transactions(message, envelopes, signed, batch, addressees.skipped).run()

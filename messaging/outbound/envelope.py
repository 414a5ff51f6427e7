"""What a transport is given and what it answers, whichever way mail leaves: the `Envelope` (what SMTP
needs besides the message bytes), the `Source` address a connection binds to and the `Pool` a domain's
direct delivery chooses it from, the server's `Reply`,
one message's `SendResult` (or `NotSent`: no transaction begun), and the `Transport` protocol that the
file outbox (outbox.py), the relay (relay.py) and direct delivery (direct/) implement.

A transport reports what the server answered; it never decides what happens to the message
(messaging/outbound/outcomes.py does). Connection failures raise OSError or smtplib.SMTPException.
"""

import re
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from domains.models import SourceAddress
from mailservice.mailbox import canonical_domain
from messaging.models import Message
from messaging.rfc5322.rendering import needs_smtputf8, parsed_address
from messaging.verp import verp_local_part


@dataclass(frozen=True)
class Pool:
    """The addresses a domain's direct delivery may leave from, in configuration order."""

    name: str
    addresses: tuple[str, ...]
    # Their warm-up rows, read with the pool: direct delivery's lanes (threads) then need no query of their own.
    rows: tuple[SourceAddress, ...] = field(default=(), compare=False, hash=False)


@dataclass(frozen=True)
class Envelope:
    """What SMTP needs besides the message bytes."""

    mail_from: str
    recipients: list[str]
    smtputf8: bool
    # Direct delivery: the source addresses the transaction may leave from (None: the system chooses);
    # `follows` says an earlier transaction of the message was begun, so this one is never held back.
    pool: Pool | None = None
    follows: bool = False


@dataclass(frozen=True)
class Source:
    """A local address an SMTP connection binds to, and the name it gives in EHLO from there."""

    address: str
    helo: str


@dataclass(frozen=True)
class NotSent:
    """No transaction was begun: every source address of the pool is at its warm-up cap, or a
    destination's limits held it back (its connection cap, its rate, its slow-down reply:
    messaging/outbound/direct/destinations.py). The message waits until `until` without using an attempt;
    `throttle` (a receiver's slow-down reply) counts against its free retries."""

    why: str
    until: datetime
    throttle: bool = False


# RFC 3463's enhanced status code at the start of a reply's text (RFC 2034): "5.1.1 user unknown".
_ENHANCED_STATUS = re.compile(r"[245]\.\d{1,3}\.\d{1,3}\b")


@dataclass(frozen=True)
class Reply:
    code: int
    text: str
    # Made by this service where no server answered (direct delivery: a null MX, a domain that does not exist).
    local: bool = False

    def __str__(self) -> str:
        return f"{self.code} {self.text}".strip()

    @property
    def enhanced_status(self) -> str:
        """The reply's enhanced status code, e.g. 5.1.1; "" when the relay gave none."""
        found = _ENHANCED_STATUS.match(self.text.lstrip(" -"))
        return found.group() if found else ""


@dataclass
class SendResult:
    """The relay's answers for one message.

    `refused` holds the recipients RCPT TO refused; `final` is the reply that ended the
    transaction: to DATA, or to MAIL FROM / the last RCPT TO when no data was sent.
    """

    final: Reply
    accepted: list[str] = field(default_factory=list)
    refused: dict[str, Reply] = field(default_factory=dict)
    # The server that answered when it is not the transport's one `host` (direct delivery: the MX host).
    remote_host: str = ""
    not_sent: NotSent | None = None  # nothing was sent, nor tried: `final` is synthesized

    @property
    def delivered(self) -> bool:
        return self.final.code == 250 and bool(self.accepted)


class Connection(Protocol):
    def send(self, *, envelope: Envelope, data: bytes, name: str) -> SendResult: ...


def merged_results(results: list[tuple[list[str], SendResult]]) -> SendResult:
    """Several transactions' results as one message's: a recipient whose transaction did not deliver is
    refused with the reply that ended it; `final` (and its server) is the last delivering reply, else the last one."""
    if len(results) == 1:
        return results[0][1]
    last = results[-1][1]
    merged = SendResult(final=last.final, remote_host=last.remote_host)
    merged.not_sent = next((result.not_sent for _, result in results if result.not_sent), None)
    for addresses, result in results:
        if result.delivered:
            merged.accepted += result.accepted
            merged.final, merged.remote_host = result.final, result.remote_host
        for address in addresses:
            if address not in result.accepted or not result.delivered:
                merged.refused[address] = result.refused.get(address, result.final)
    return merged


class Transport(Protocol):
    host: str  # the relay that answers, recorded with the events of its replies ("" for the file outbox)

    def connection(self) -> AbstractContextManager[Connection]: ...

    def close(self) -> None: ...  # the connections it keeps open between batches (worker shutdown)


def envelope_for(
    *, message: Message, recipients: list[str], return_path_domain: str | None, recipient_index: int | None = None
) -> Envelope:
    """MAIL FROM is the VERP return path when one is configured (of the recipient at `recipient_index`
    of the message's envelope recipients, or of the whole message when None: messaging.verp), else the
    From address (the envelope sender of a message submitted over SMTP).

    `recipients` are wire forms (`Address.wire`); the transport writes them between < > as they are."""
    sender = message.envelope_from if message.submitted else message.from_address
    if return_path_domain:
        local_part = verp_local_part(message.public_id, recipient_index)
        mail_from = f"{local_part}@{canonical_domain(return_path_domain, trailing_dot=True)}"
    else:
        mail_from = parsed_address(sender).wire
    return Envelope(mail_from=mail_from, recipients=recipients, smtputf8=needs_smtputf8(message))

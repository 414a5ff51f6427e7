"""What one attempt at a message came to, and its record: a final status, or a retry.

`classify` turns a transport's `SendResult` into a `SendOutcome`: delivered, bounced or failed per
recipient, or a temporary failure (4xx, connection error, timeout) that schedules the next attempt
with exponential backoff and jitter in `next_attempt_at` (`retry_delay`). A receiver's "slow down"
(messaging/outbound/provider_rules.py) or a destination's limit puts the message back without using
an attempt, each put-back after the first a little later, FREE_THROTTLES times in a row at most; then
the attempt counts (`slowed_down`). A greylisted message waits MAILSERVICE_GREYLIST_DELAY, its first
greylisting uncharged (`greylisted`).

The outcome is recorded with one write conditional on the claimer's lease value (the fencing token,
messaging/outbound/leases.py) and on the message's status, with its events, in one transaction
(`record_outcome`, or the one statement of messaging/sql.py): a worker that lost its lease records
nothing. A database error while recording is retried RECORD_RETRY_SECONDS apart for as long as a lease
lasts (`record_durably`): the message may already be at the relay, and the fence makes a retry safe.
"""

import logging
import random
import smtplib
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from itertools import takewhile

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction
from django.utils import timezone

from mailservice import metrics
from mailservice.mailbox import comparison_key
from messaging import sql
from messaging.bounces import bounce_apply
from messaging.models import (
    BounceType,
    EventRecord,
    EventType,
    Message,
    MessageEvent,
    Status,
)
from messaging.outbound.envelope import NotSent, Reply, SendResult
from messaging.outbound.fleet_limits import is_slow_down, relay_slow_down
from messaging.outbound.greylisting import delay_worked, greylist_delay, is_greylisting
from messaging.outbound.smtp_client import reply_of
from messaging.outbound.transports import is_direct_delivery, transport
from messaging.refusals import NO_FAILURE, Speaker, Verdict, classify_refusal

logger = logging.getLogger(__name__)
RECORD_RETRY_SECONDS = 0.5
# A message put back by this many slow-down answers in a row (no attempt used each time) is charged
# the next one, with the backoff: a receiver that keeps throttling cannot keep it in a fast loop.
FREE_THROTTLES = 10
# Each free put-back after the first waits longer (0.25 s, doubling, at most 5 s): a relay at its
# connection limit greets every new connection with 421 while its slots are busy, and retries at once
# spent all ten free throttles in two seconds (tests/messaging/test_postfix_peers.py). Ten take ~28 s.
THROTTLE_PAUSE_BASE_SECONDS = 0.25
THROTTLE_PAUSE_MAX_SECONDS = 5.0
THROTTLE_MARK = "asked to slow down"  # in the `why` of every slow-down put-back, so they can be counted
GREYLIST_MARK = "greylisted, no attempt used"  # in the detail of a message's first greylisting
FOLLOW_UP_HORIZON = 5.0  # seconds: a message put back until no later than this gets a follow-up batch


def retry_delay(*, attempt: int) -> timedelta:
    """How long to wait after failed attempt number `attempt` (1-based): base * 2^(attempt-1), capped, plus jitter."""
    base = settings.MAILSERVICE_DISPATCH_BACKOFF_BASE * 2 ** (attempt - 1)
    capped = min(base, settings.MAILSERVICE_DISPATCH_BACKOFF_MAX)
    return timedelta(seconds=capped * (1 + random.uniform(0, settings.MAILSERVICE_DISPATCH_BACKOFF_JITTER)))


@dataclass(frozen=True)
class Refusal:
    """A receiver's permanent (5xx) reply for one recipient, at RCPT or to the DATA of its transaction."""

    recipient: str  # as sent in RCPT TO
    reply: Reply


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
    refusals: tuple[Refusal, ...] = ()  # recorded with the outcome, then put through the bounce policy


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


def _verdict(reply: Reply | None) -> Verdict:
    """Why the receiver refused or deferred, from `reply`'s codes (messaging/refusals.py): said by this
    service (`reply.local`), by the recipient's MX in direct delivery, or by the relay."""
    if reply is None:
        return NO_FAILURE
    if reply.local:
        speaker = Speaker.SERVICE
    else:
        speaker = Speaker.RECEIVER if is_direct_delivery(settings.EMAIL_URL or "") else Speaker.RELAY
    return classify_refusal(reply.code, reply.enhanced_status, reply.text, speaker)


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
    given, with the failure's reason (and for an authentication refusal, the check of `domain` to fix).
    A bounce is hard or soft as messaging/refusals.py's verdict says: here, once."""
    verdict = _verdict(reply)
    return EventRecord(
        kind,
        recipient,
        f"{reply if detail is None else detail}{verdict.note(domain)}",
        smtp_code=reply.code,
        enhanced_status=reply.enhanced_status,
        diagnostic=reply.text,
        bounce_type=verdict.bounce_type if bounce else "",
        remote_host=host or transport().host,
        cause=verdict.cause,
        fix_check=verdict.check,
        reason=verdict.reason,
    )


def temporary(message: Message, error: str, reply: Reply | None = None) -> SendOutcome:
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


def greylisted(message: Message, reply: Reply, *, domain: str) -> SendOutcome:
    """A receiver of `domain` greylisted the message (`reply`): it is tried again once the greylist delay
    has passed (MAILSERVICE_GREYLIST_DELAY, or what worked for the domain before), on its own. Its first
    greylisting uses no attempt (any sender meets one on a first try); a later one is charged as any
    deferral, and waits the same delay rather than the backoff."""
    retry_at = timezone.now() + timedelta(seconds=greylist_delay(domain))
    if message.events.filter(type=EventType.DEFERRED, detail__contains=GREYLIST_MARK).exists():
        return replace(temporary(message, f"greylisted again: {reply}", reply), retry_at=retry_at)
    detail = f"attempt {message.attempts}, {GREYLIST_MARK}: {reply}; next try at {retry_at:%H:%M:%S} UTC"
    event = _reply_event(EventType.DEFERRED, "", reply, domain=message.domain.name, detail=detail)
    return _retry([event], str(reply), retry_at=retry_at, charged=False)


def _refused(result: SendResult) -> dict[str, Reply]:
    """Each refused recipient's reply: at RCPT, and for a transaction refused for good after its RCPTs
    (a 5xx to DATA), each recipient it had."""
    refused = dict(result.refused)
    if not result.delivered and result.final.code >= 500:
        refused |= dict.fromkeys(result.accepted, result.final)
    return refused


def _refusal_event(rcpt: str, reply: Reply, *, domain: str, host: str) -> EventRecord:
    """A refused recipient: `recipient_rejected`, or for a server's 5xx the verdict calls soft (a 4.x.x status,
    a full mailbox: messaging/refusals.py) `soft_bounced` under the address's suppression key, so that it
    counts toward the soft-bounce limit with the ones reports bring. A 4xx it was left with is no bounce:
    it counts for nothing."""
    if _is_refusal(reply) and _verdict(reply).bounce_type == BounceType.SOFT:
        return _reply_event(EventType.SOFT_BOUNCED, comparison_key(rcpt), reply, domain=domain, bounce=True, host=host)
    return _reply_event(EventType.RECIPIENT_REJECTED, rcpt, reply, domain=domain, bounce=True, host=host)


def _recipient_events(
    result: SendResult, refused: dict[str, Reply], *, domain: str, host: str
) -> dict[str, EventRecord]:
    """An event per recipient refused at RCPT. A transaction refused at DATA is recorded by the message's one
    event (its reply), and a soft refusal also by a `soft_bounced` per recipient: the limit counts them one by one."""
    events = {}
    for rcpt, reply in refused.items():
        event = _refusal_event(rcpt, reply, domain=domain, host=host)
        if rcpt in result.refused or event.type == EventType.SOFT_BOUNCED:
            events[rcpt] = event
    return events


def _is_refusal(reply: Reply) -> bool:
    """A server's permanent reply: the bounce policy's to apply. The service's own (a null MX) is not."""
    return reply.code >= 500 and not reply.local


def classify(message: Message, result: SendResult) -> SendOutcome:
    domain, refused = message.domain.name, _refused(result)
    host = result.remote_host
    events = _recipient_events(result, refused, domain=domain, host=host)
    rejected = list(events.values())
    refusals = tuple(Refusal(rcpt, reply) for rcpt, reply in refused.items() if _is_refusal(reply))
    if result.delivered:
        delivered = _reply_event(EventType.DELIVERED, "", result.final, domain=domain, host=host)
        if message.last_error:  # a retry: perhaps of a greylisted message, whose delay worked
            _learn_greylist_delay(message, result)
        return SendOutcome(Status.DELIVERED, [*rejected, delivered], refusals=refusals)
    replies = [result.final] if result.accepted or not result.refused else list(result.refused.values())
    if all(reply.code >= 500 and reply.local for reply in replies):
        # No server refused it: the service found it cannot be delivered (a null MX, no such domain).
        failed = _reply_event(EventType.FAILED, "", result.final, domain=domain, host=host)
        return SendOutcome(Status.FAILED, [*rejected, failed], failed.detail, refusals=refusals)
    if all(reply.code >= 500 for reply in replies):
        return _bounced(result, rejected, refusals, domain=domain, host=host)
    # Tried again for the rest: the refusals for good are recorded now, with their policy, so that a
    # recipient the policy suppressed is skipped by the retry instead of being refused again.
    greylisting = next((reply for reply in replies if is_greylisting(reply)), None)
    if greylisting is None:
        retry = temporary(message, str(result.final), result.final)
    else:
        retry = greylisted(message, greylisting, domain=_recipient_domain(message, result))
    recorded = [events[refusal.recipient] for refusal in refusals if refusal.recipient in events]
    if retry.status == Status.FAILED and is_direct_delivery(settings.EMAIL_URL or ""):
        recorded, refusals = _with_soft_bounces(result, recorded, refusals, domain=domain)
    return replace(retry, events=[*recorded, *retry.events], refusals=refusals)


def _bounced(
    result: SendResult, rejected: list[EventRecord], refusals: tuple[Refusal, ...], *, domain: str, host: str
) -> SendOutcome:
    """Every recipient refused for good. Refused at RCPT, each gets a bounce naming it, as a DSN's recipients
    do: a message-level one as well would tell the application the same bounce twice. Refused after DATA, the
    message-level bounce stands for those the transaction carried."""
    bounced = _reply_event(EventType.BOUNCED, "", result.final, domain=domain, bounce=True, host=host)
    if rejected and not result.accepted:
        each = [replace(event, type=EventType.BOUNCED) if event.type == EventType.RECIPIENT_REJECTED else event
                for event in rejected]  # fmt: skip
        return SendOutcome(Status.BOUNCED, each, bounced.detail, refusals=refusals)
    return SendOutcome(Status.BOUNCED, [*rejected, bounced], bounced.detail, refusals=refusals)


def _with_soft_bounces(
    result: SendResult, events: list[EventRecord], refusals: tuple[Refusal, ...], *, domain: str
) -> tuple[list[EventRecord], tuple[Refusal, ...]]:
    """`events` and `refusals` with a soft bounce for each recipient the receiver deferred to the end."""
    given_up = _given_up(result)
    host = result.remote_host
    soft = [
        _reply_event(EventType.SOFT_BOUNCED, comparison_key(rcpt), reply, domain=domain, bounce=True, host=host)
        for rcpt, reply in given_up.items()
    ]
    return [*events, *soft], refusals + tuple(Refusal(rcpt, reply) for rcpt, reply in given_up.items())


def _given_up(result: SendResult) -> dict[str, Reply]:
    """The recipients a receiver kept deferring (4xx) until the attempts ran out, with its last reply: in
    direct delivery no DSN will ever say so, so each is a soft bounce (as Postfix bounces a message whose
    queue lifetime ended, with a 4.x.x status), counted toward the soft-bounce limit."""
    if not result.remote_host:  # no receiver answered (no host could be reached or used): the service's own
        return {}
    given_up = {rcpt: reply for rcpt, reply in result.refused.items() if 400 <= reply.code < 500}
    if 400 <= result.final.code < 500:
        given_up |= dict.fromkeys(result.accepted, result.final)
    return given_up


def _recipient_domain(message: Message, result: SendResult) -> str:
    """The recipient domain a greylisting reply is about (its delay is learned per domain)."""
    greylisted_rcpt = next((rcpt for rcpt, reply in result.refused.items() if is_greylisting(reply)), None)
    rcpt = greylisted_rcpt or next(iter(result.accepted), "") or next(iter(message.to), "")
    return rcpt.rpartition("@")[2].lower()


def _learn_greylist_delay(message: Message, result: SendResult) -> None:
    """A greylisted message delivered: the time since its first greylisting worked for its domain."""
    first = (
        message.events.filter(type=EventType.DEFERRED, detail__contains=GREYLIST_MARK)
        .order_by("pk")
        .values_list("created_at", flat=True)
        .first()
    )
    if first is not None:
        delay_worked(_recipient_domain(message, result), (timezone.now() - first).total_seconds())


def _refusals_apply(message: Message, refusals: tuple[Refusal, ...]) -> None:
    """Each refused recipient through the bounce policy, as a report of the same reply would be."""
    for refusal in refusals:
        bounce_apply(
            message=message,
            address=comparison_key(refusal.recipient),
            verdict=_verdict(refusal.reply),
            detail=str(refusal.reply),
        )


def record_outcome(message: Message, outcome: SendOutcome, now: datetime) -> bool:
    """Write the outcome if this worker still holds the lease; False if it lost it. Refused recipients
    are put through the bounce policy in the same transaction: suppressed by the attempt that recorded
    their refusal, or not at all (the outcome is not recorded either, and its retry does both)."""
    if not outcome.refusals:
        return _write_outcome(message, outcome, now)
    with transaction.atomic():
        written = _write_outcome(message, outcome, now)
        if written:
            _refusals_apply(message, outcome.refusals)
        return written


def _write_outcome(message: Message, outcome: SendOutcome, now: datetime) -> bool:
    """The fenced write of `record_outcome`: the message's row and its events."""
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


def record_durably(message: Message, outcome: SendOutcome) -> bool:
    """`record_outcome`, retried across a database outage for as long as a lease lasts.

    The message may already be at the relay: giving up here would leave it leased and `accepted`,
    and once the lease ran out it would be claimed and sent again. Retrying is safe because the
    write is fenced by the lease value: if another worker claimed the message meanwhile, it is refused.
    """
    deadline = time.monotonic() + settings.MAILSERVICE_DISPATCH_LEASE_SECONDS
    while True:
        try:
            return record_outcome(message, outcome, timezone.now())
        except (OperationalError, InterfaceError) as exc:
            if time.monotonic() >= deadline:
                raise
            logger.warning("recording the outcome of %s: database unavailable, retrying: %s", message.public_id, exc)
            connection.close()  # a connection the server cut is not reused
            time.sleep(RECORD_RETRY_SECONDS)


def not_sent(
    message: Message,
    *,
    retry_at: datetime,
    why: str,
    slow_down: bool = False,
    follow_up: bool = False,
    reply: Reply | None = None,
) -> SendOutcome:
    """Put a claimed message back until `retry_at` without using an attempt: held, or the relay or a
    destination asked to slow down (or is at its limits) with `reply`, whose cause the event carries.
    The service's own doing, so a `held` event: in the message's history, never an `email.delayed`."""
    verdict = _verdict(reply)
    note = verdict.note(message.domain.name)
    detail = f"not sent, no attempt used: {why}; next try at {retry_at:%H:%M:%S} UTC{note}"
    event = EventRecord(EventType.HELD, "", detail, cause=verdict.cause, fix_check=verdict.check, reason=verdict.reason)
    return _retry([event], why, retry_at=retry_at, charged=False, slow_down=slow_down, follow_up=follow_up)


def _throttles_in_a_row(message: Message) -> int:
    """How many of the message's latest events are slow-down put-backs (up to FREE_THROTTLES)."""
    recent = message.events.order_by("-pk").values_list("type", "detail")[:FREE_THROTTLES]
    return len(list(takewhile(lambda event: event[0] == EventType.HELD and THROTTLE_MARK in event[1], recent)))


def slowed_down(message: Message, why: str, *, reply: Reply, retry_at: datetime, relay: bool) -> SendOutcome:
    """A slow-down answer (`reply`): put back without using an attempt, unless FREE_THROTTLES in a row already
    were; then the attempt counts (and the backoff applies). `relay`: the batch stops (the relay's rate fell),
    and each free put-back waits a little longer; a destination's (direct delivery) already waits its
    spacing (messaging/outbound/direct/spacing.py), which doubles fleet-wide, not per message."""
    in_a_row = _throttles_in_a_row(message)
    if in_a_row >= FREE_THROTTLES:
        charged = temporary(message, f"{why} ({FREE_THROTTLES} times in a row without using an attempt)", reply)
        return replace(charged, slow_down=relay)
    if relay:
        retry_at += _throttle_pause(in_a_row)
    return not_sent(message, retry_at=retry_at, why=why, slow_down=relay, follow_up=not relay, reply=reply)


def _throttle_pause(in_a_row: int) -> timedelta:
    """How much later than asked a message put back by `in_a_row` slow-downs before this one is retried."""
    if in_a_row == 0:
        return timedelta(0)
    seconds = THROTTLE_PAUSE_BASE_SECONDS * 2 ** (in_a_row - 1)
    return timedelta(seconds=min(seconds, THROTTLE_PAUSE_MAX_SECONDS))


def destination_limited(message: Message, refusal: NotSent, reply: Reply) -> SendOutcome:
    """Direct delivery held the message back untried: a destination's limit (connection cap, rate, a
    slow-down answer: `reply`) or its pool's warm-up caps. A follow-up batch comes for what is due within seconds."""
    if refusal.throttle:
        return slowed_down(message, refusal.why, reply=reply, retry_at=refusal.until, relay=False)
    soon = refusal.until - timezone.now() <= timedelta(seconds=FOLLOW_UP_HORIZON)
    return not_sent(message, retry_at=refusal.until, why=refusal.why, follow_up=soon)


class PartlySent(Exception):
    """The relay connection failed after some of a message's recipients got it: `outcome` records them
    as delivered and the rest as not sent (sending the message again would deliver it twice)."""

    def __init__(self, outcome: SendOutcome, error: str) -> None:
        super().__init__(error)
        self.outcome = outcome


def _log_outcome(message: Message, outcome: SendOutcome) -> None:
    """One line per attempt: its result (a retry is `accepted`) and the relay's last error, if any."""
    context = {"message_id": message.public_id, "domain": message.domain.name}
    detail = f" ({outcome.last_error})" if outcome.last_error else ""
    logger.info("dispatch: %s%s", outcome.status, detail, extra=context)


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def connection_failed(message: Message, exc: OSError | smtplib.SMTPException | PartlySent) -> SendOutcome:
    """The outcome of the message in flight when the relay connection failed, and the fleet's slow-down
    when the relay refused the connection at its cap. A slow-down answer at connect or greeting (421)
    costs no attempt: the message was not sent, and is due again at once at the lowered rate."""
    error = str(exc) if isinstance(exc, PartlySent) else error_text(exc)
    logger.warning("dispatch of %s: the relay connection failed: %s", message.public_id, error)
    metrics.RELAY_REPLIES.labels(reply_class="connection_error").inc()
    if isinstance(exc, PartlySent):
        return exc.outcome
    reply = reply_of(exc)
    if reply is not None and is_slow_down(reply):
        relay_slow_down(reply=str(reply))
        why = f"the relay {THROTTLE_MARK} before the message: {reply}"
        return slowed_down(message, why, reply=reply, retry_at=timezone.now(), relay=True)
    if isinstance(exc, ConnectionRefusedError):
        relay_slow_down(reply=error)  # refused at the relay's connection cap: the fleet backs off together
    return temporary(message, error)


def record_attempt(message: Message, outcome: SendOutcome) -> bool:
    """Record the outcome durably, counted and logged; False if the lease was lost meanwhile."""
    if not record_durably(message, outcome):
        return False
    if not message.is_test:  # a simulated outcome is no delivery, bounce or complaint
        metrics.dispatch_recorded(domain=message.domain.name, status=outcome.status, accepted_at=message.created_at)
    _log_outcome(message, outcome)
    return True

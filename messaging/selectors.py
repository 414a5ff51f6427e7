from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core import signing
from django.db.models import Case, CharField, Count, F, Min, Q, Sum, Value, When
from django.db.models.functions import Cast, Concat
from django.utils import timezone

from domains.models import Domain
from mailservice.errors import ErrorCode, NotFound, ValidationFailed
from mailservice.mailbox import comparison_key
from messaging.cursors import cursor_decode, cursor_encode
from messaging.models import (
    DailyMessageCount,
    Direction,
    EventType,
    Message,
    MessageEvent,
    Status,
    message_by_public_id,
)
from messaging.refusals import SENDER_REASONS
from messaging.rfc5322.parsing import attachment_parts, decode_header_value, parse_bytes, part_bytes, storable

_CURSOR_SALT = "messaging.message_list.cursor"
# Columns a list item needs: bodies and raw source stay on disk.
_LIST_COLUMNS = ("public_id", "domain__public_id", "direction", "from_address", "to", "subject", "status", "created_at")


@dataclass(frozen=True)
class MessagePage:
    messages: list[Message]
    has_more: bool
    next_cursor: str | None


def _encode_cursor(*, domain: Domain, direction: str | None, last: Message) -> str:
    position = {"d": domain.public_id, "f": direction or "", "t": last.created_at.isoformat(), "i": last.public_id}
    return signing.dumps(position, salt=_CURSOR_SALT, compress=False)


def _decode_cursor(*, cursor: str, domain: Domain, direction: str | None) -> tuple[datetime, str]:
    invalid = ValidationFailed("after: invalid cursor", code=ErrorCode.INVALID_CURSOR)
    try:
        position = signing.loads(cursor, salt=_CURSOR_SALT)
        owner, made_for, created_at, public_id = position["d"], position["f"], position["t"], position["i"]
        created = datetime.fromisoformat(created_at)
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise invalid from None
    if owner != domain.public_id or not isinstance(public_id, str):
        raise invalid  # a cursor from another domain looks exactly like a forged one
    if made_for != (direction or ""):
        raise ValidationFailed(
            f"after: this cursor was made for direction={made_for or 'any'}; repeat that filter to continue",
            code=ErrorCode.INVALID_CURSOR,
        )
    return created, public_id


def message_list(
    *, domain: Domain, direction: str | None, limit: int, after: str | None, is_test: bool = False
) -> MessagePage:
    """Newest first by (created_at, public_id), keyset-paginated so pages neither skip nor repeat.

    A test key sees only test messages and a live key only live ones."""
    messages = Message.objects.filter(domain=domain, is_test=is_test).select_related("domain").only(*_LIST_COLUMNS)
    if direction:
        messages = messages.filter(direction=direction)
    if after:
        created, public_id = _decode_cursor(cursor=after, domain=domain, direction=direction)
        # The redundant created_at <= bound lets PostgreSQL range-scan the index.
        messages = messages.filter(
            Q(created_at__lt=created) | Q(created_at=created, public_id__lt=public_id), created_at__lte=created
        )
    page = list(messages.order_by("-created_at", "-public_id")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    next_cursor = _encode_cursor(domain=domain, direction=direction, last=page[-1]) if has_more else None
    return MessagePage(messages=page, has_more=has_more, next_cursor=next_cursor)


def message_get(*, domain: Domain, public_id: str, is_test: bool = False) -> Message:
    """A message of this domain; another domain's message (or one of the other mode, live or test)
    is reported exactly like a missing one."""
    if "\x00" in public_id:  # PostgreSQL rejects NUL in a query; no id contains one anyway
        raise NotFound("No message with that id")
    mine = Message.objects.select_related("domain").filter(domain=domain, is_test=is_test)
    message = message_by_public_id(mine, public_id)
    if message is None:
        raise NotFound("No message with that id")
    return message


@dataclass(frozen=True)
class DeliveryRates:
    """Bounced and complained counts among some sent messages: the console's rates and the safeguard's."""

    sent: int
    bounced: int
    complained: int

    @property
    def bounce_rate(self) -> float | None:
        return self.bounced / self.sent if self.sent else None

    @property
    def complaint_rate(self) -> float | None:
        return self.complained / self.sent if self.sent else None


# The aggregate behind DeliveryRates: Message.objects....aggregate(**DELIVERY_COUNTS) or .annotate(...).
DELIVERY_COUNTS = {
    "sent": Count("id"),
    "bounced": Count("id", filter=Q(status=Status.BOUNCED)),
    "complained": Count("id", filter=Q(status=Status.COMPLAINED)),
}


def delivery_rates_of_recent_sends(*, domain: Domain, hours: float, sends: int) -> DeliveryRates:
    """Among the domain's most recent sends (the last `sends`, none older than `hours` hours): how many,
    and how many distinct recipients bounced (hard) or complained.

    Counted per recipient address, not per message, so one person reporting many messages counts
    once. A bounce the relay gave at dispatch names no recipient and counts once per message. A complaint
    not from a trusted feedback loop counts only with MAILSERVICE_COMPLAINTS_UNAUTHENTICATED=count."""
    since = timezone.now() - timedelta(hours=hours)
    window = (
        # Test-key sends (the sandbox) never count towards a domain's reputation.
        Message.objects.filter(domain=domain, direction=Direction.SENT, is_test=False, created_at__gte=since)
        .order_by("-created_at", "-public_id")
        .values("id")[:sends]
    )
    sent = Message.objects.filter(id__in=window).count()
    who = Case(
        When(recipient="", then=Concat(Value("message "), Cast("message_id", CharField()))), default=F("recipient")
    )
    complained = Q(type=EventType.COMPLAINED)
    if settings.MAILSERVICE_COMPLAINTS_UNAUTHENTICATED != "count":
        # Only a trusted feedback loop's complaints (messaging/inbound/feedback_loops.py); NULL: recorded
        # before the distinction, or by the sandbox, as they always counted.
        complained &= ~Q(complaint_authenticated=False)
    counts = MessageEvent.objects.filter(
        message_id__in=window, type__in=[EventType.BOUNCED, EventType.COMPLAINED]
    ).aggregate(
        bounced=Count(who, distinct=True, filter=Q(type=EventType.BOUNCED)),
        complained=Count(who, distinct=True, filter=complained),
    )
    return DeliveryRates(sent=sent, bounced=counts["bounced"], complained=counts["complained"])


def delivery_rates(*, domain_ids: list[int], days: int) -> dict[int, DeliveryRates]:
    """Bounced and complained shares of each domain's messages sent in the last `days` days, in one query.

    Messages the retention purge deleted count through DailyMessageCount, at day resolution."""
    since = timezone.now() - timedelta(days=days)
    sent, bounced, complained = Q(direction=Direction.SENT), Q(status=Status.BOUNCED), Q(status=Status.COMPLAINED)
    live = (
        Message.objects.filter(sent, domain_id__in=domain_ids, is_test=False, created_at__gte=since)
        .values("domain_id")
        .annotate(sent=Count("id"), bounced=Count("id", filter=bounced), complained=Count("id", filter=complained))
        .order_by()
    )
    archived = (
        DailyMessageCount.objects.filter(sent, domain_id__in=domain_ids, day__gte=since.date())
        .values("domain_id")
        .annotate(sent=Sum("count"), bounced=Sum("count", filter=bounced), complained=Sum("count", filter=complained))
        .order_by()
    )
    found = {domain_id: [0, 0, 0] for domain_id in domain_ids}
    for row in live.union(archived, all=True):
        counts = found[row["domain_id"]]
        counts[0] += row["sent"] or 0
        counts[1] += row["bounced"] or 0
        counts[2] += row["complained"] or 0
    return {domain_id: DeliveryRates(*counts) for domain_id, counts in found.items()}


@dataclass(frozen=True)
class RefusalHealth:
    """The sending domain's health as receivers judged it: of the messages it sent in the window, how many
    were refused or deferred for a reason that is the sender's to fix (messaging/refusals.py
    SENDER_REASONS: blocked, spam_detected, authentication, policy), per reason. Such refusals never
    suppress the recipient; they are counted here instead."""

    days: int
    sent: int
    by_reason: dict[str, int]

    @property
    def refused(self) -> int:
        return sum(self.by_reason.values())


def domain_refusal_health(*, domain: Domain, days: int) -> RefusalHealth:
    """RefusalHealth over the last `days` days, counted per message (a refusal at RCPT and the bounce it
    led to are one), with the service's own put-backs (`held`) left out: no receiver said those."""
    since = timezone.now() - timedelta(days=days)
    sent = Message.objects.filter(domain=domain, direction=Direction.SENT, is_test=False, created_at__gte=since).count()
    rows = (
        MessageEvent.objects.filter(
            reason__in=sorted(SENDER_REASONS), created_at__gte=since, message__domain=domain, message__is_test=False
        )
        .exclude(type=EventType.HELD)
        .values("reason")
        .annotate(messages=Count("message_id", distinct=True))
        .order_by()
    )
    by_reason = {row["reason"]: row["messages"] for row in rows}
    return RefusalHealth(days=days, sent=sent, by_reason=dict(sorted(by_reason.items())))


@dataclass(frozen=True)
class RecipientOutcome:
    address: str
    label: str  # delivered, deferred, bounced (hard), soft bounced, complained, suppressed, ...
    enhanced_status: str = ""
    detail: str = ""


# The event that decides a recipient's outcome, strongest first: what the recipient did overrides
# what the relay said, and a final failure overrides a delay.
_DECISIVE = {
    EventType.COMPLAINED: "complained",
    EventType.BOUNCED: "bounced (hard)",
    EventType.SOFT_BOUNCED: "bounced (soft)",
    EventType.SUPPRESSED: "suppressed",
    EventType.RECIPIENT_REJECTED: "refused by the receiver",
    EventType.DELAYED: "delayed",
}
# A message still queued after one of these shows each recipient without an outcome as deferred.
_NOT_YET = {EventType.DEFERRED, EventType.HELD}
# Without an event naming the recipient, the message's own status speaks for each of them.
_BY_STATUS = {
    Status.ACCEPTED: "pending",
    Status.DELIVERED: "delivered",
    Status.BOUNCED: "bounced (hard)",
    Status.COMPLAINED: "delivered",
    Status.FAILED: "failed",
    Status.RECEIVED: "received",
}


def recipient_outcomes(*, message: Message) -> list[RecipientOutcome]:
    """Each envelope recipient (To, Cc, Bcc, once each) with its outcome, for the console's message page."""
    history = list(message.events.all())
    events = [event for event in history if event.recipient]
    deferred = message.status == Status.ACCEPTED and any(event.type in _NOT_YET for event in history)
    keyed = [(comparison_key(event.recipient), event) for event in events]  # each event's address parsed once
    outcomes = []
    for address in dict.fromkeys(comparison_key(mailbox) for mailbox in message.envelope_mailboxes):
        mine = [event for key, event in keyed if key == address]
        decisive = next((e for kind in _DECISIVE for e in reversed(mine) if e.type == kind), None)
        if decisive is not None:
            outcome = RecipientOutcome(
                address, _DECISIVE[EventType(decisive.type)], decisive.enhanced_status, decisive.detail
            )
        else:
            outcome = RecipientOutcome(address, "deferred" if deferred else _BY_STATUS.get(Status(message.status), ""))
        outcomes.append(outcome)
    return outcomes


@dataclass(frozen=True)
class QueueState:
    depth: int  # accepted messages not yet delivered or given up
    oldest_due_seconds: float  # how long the longest-waiting due message has been due; 0 if none is due


def queue_state(*, now: datetime) -> QueueState:
    """Two aggregates on the queue's partial index (message_pending_idx: accepted, by next_attempt_at).

    COUNT(*), not COUNT(id): the index holds no id, and only COUNT(*) is an index-only scan (about
    6 ms for 20 000 queued among 1 000 000 messages, against 400 ms reading every row)."""
    queued = Message.objects.filter(status=Status.ACCEPTED)
    depth = queued.count()
    oldest_due = queued.filter(next_attempt_at__lte=now).aggregate(at=Min("next_attempt_at"))["at"]
    return QueueState(depth=depth, oldest_due_seconds=(now - oldest_due).total_seconds() if oldest_due else 0.0)


@dataclass(frozen=True)
class Attachment:
    filename: str | None
    content_type: str
    data: bytes


def _received_source(*, domain: Domain, public_id: str, is_test: bool) -> bytes:
    message = message_get(domain=domain, public_id=public_id, is_test=is_test)
    if message.direction != Direction.RECEIVED or message.raw is None:
        raise NotFound("Only received messages keep their source")
    return bytes(message.raw)


def message_raw(*, domain: Domain, public_id: str, is_test: bool = False) -> bytes:
    """A received message's source exactly as it arrived."""
    return _received_source(domain=domain, public_id=public_id, is_test=is_test)


def message_attachment(*, domain: Domain, public_id: str, index: int, is_test: bool = False) -> Attachment:
    """Attachment number `index` (0-based, in the order `email.received` lists them) of a received message."""
    parts = attachment_parts(parse_bytes(_received_source(domain=domain, public_id=public_id, is_test=is_test)))
    if not 0 <= index < len(parts):
        raise NotFound("No attachment with that number")
    part = parts[index]
    filename = storable(decode_header_value(part.get_filename())) or None
    return Attachment(filename=filename, content_type=part.get_content_type(), data=part_bytes(part))


# --- a message's events, and a domain's event stream (GET /v1/messages/{id}/events, GET /v1/events) -------------


_EVENT_CURSOR_SALT = "messaging.event_page.cursor"


def message_events(*, message: Message, types: Collection[str]) -> list[MessageEvent]:
    """The message's events of these (internal) types, oldest first. Events are never older than their
    message, so created_at >= the message's names the partitions that can hold them."""
    events = MessageEvent.objects.filter(message=message, created_at__gte=message.created_at, type__in=types)
    return list(events.order_by("created_at", "id"))


@dataclass(frozen=True)
class EventPage:
    events: list[MessageEvent]
    has_more: bool
    next_cursor: str | None


def event_page(
    *, domain: Domain, is_test: bool, types: Collection[str], since: datetime | None, limit: int, after: str | None
) -> EventPage:
    """A domain side's events of these (internal) types, oldest first by (created_at, id), keyset-paginated
    on event_stream_idx. Every bound is on created_at, the partition key, so on PostgreSQL a page reads the
    partitions from its position on, each by its index, whatever the history holds."""
    events = MessageEvent.objects.filter(domain=domain, is_test=is_test, type__in=types)
    owner, filters = _event_cursor_scope(domain=domain, is_test=is_test, types=types, since=since)
    if since is not None:
        events = events.filter(created_at__gte=since)
    if after:
        created, last = cursor_decode(salt=_EVENT_CURSOR_SALT, cursor=after, owner=owner, filters=filters)
        if not isinstance(last, int):
            raise ValidationFailed("after: invalid cursor", code=ErrorCode.INVALID_CURSOR)
        events = events.filter(Q(created_at__gt=created) | Q(created_at=created, id__gt=last), created_at__gte=created)
    page = list(events.order_by("created_at", "id")[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    next_cursor = None
    if has_more:
        next_cursor = event_cursor(domain=domain, is_test=is_test, types=types, since=since, last=page[-1])
    return EventPage(events=page, has_more=has_more, next_cursor=next_cursor)


def _event_cursor_scope(
    *, domain: Domain, is_test: bool, types: Collection[str], since: datetime | None
) -> tuple[str, str]:
    """Whose stream a cursor continues, and with which filters."""
    return f"{domain.public_id}:{int(is_test)}", f"{','.join(sorted(types))}:{since.isoformat() if since else ''}"


def event_cursor(
    *, domain: Domain, is_test: bool, types: Collection[str], since: datetime | None, last: MessageEvent
) -> str:
    """The cursor of a page of event_page that ends with `last`."""
    owner, filters = _event_cursor_scope(domain=domain, is_test=is_test, types=types, since=since)
    return cursor_encode(salt=_EVENT_CURSOR_SALT, owner=owner, filters=filters, moment=last.created_at, key=last.pk)

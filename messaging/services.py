from dataclasses import dataclass, field
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from domains.models import DailyUsage, Domain, SendingControl
from domains.selectors import global_sending_paused
from domains.services import allowance_consume, allowance_day_open, allowance_exhausted
from mailservice.errors import ErrorCode, PermissionDenied, SendingPaused, ValidationFailed
from mailservice.mailbox import address_of
from messaging.inserts import insert_fields, insert_values
from messaging.models import Direction, EventType, Message, MessageEvent, Status
from messaging.tasks import dispatch_enqueue
from templates_app.selectors import template_version_for_send
from templates_app.services import Variables, template_render


@dataclass(frozen=True)
class TemplateReference:
    id: str
    version: int | None = None
    variables: Variables = field(default_factory=dict)


@dataclass(frozen=True)
class SendRequest:
    """A validated POST /v1/send body: inline content, or a template reference."""

    from_address: str
    to: list[str]
    cc: list[str]
    bcc: list[str]
    reply_to: list[str]
    subject: str | None
    text: str | None = None
    html: str | None = None
    template: TemplateReference | None = None


PAUSED_MESSAGE = "Sending is paused: production sending is not activated for this domain; no message was sent"


def _is_on_domain(address: str, domain: Domain) -> bool:
    """Exact and case-insensitive; a Unicode domain matches its stored IDNA (xn--) form."""
    try:
        sender_domain = address.rpartition("@")[2].lower().encode("idna").decode("ascii")
    except UnicodeError:
        return False
    return sender_domain == domain.name


def message_send(*, domain: Domain, request: SendRequest, is_test: bool = False) -> Message:
    """Store an outbound message as `accepted`, after every check of the spec, in its order.

    Nothing is stored when any check fails. Dispatch starts only once the row is committed. A test
    key's message (`is_test`) passes the same checks but does not count against the allowance;
    dispatch simulates its outcome instead of handing it to SMTP (messaging/sandbox.py).
    """
    subject, text, html, version = request.subject, request.text, request.html, None
    if request.template is not None:
        version = template_version_for_send(
            domain=domain, reference=request.template.id, version=request.template.version
        )
        rendered = template_render(version=version, variables=request.template.variables, subject=request.subject)
        subject, text, html = rendered.subject, rendered.text, rendered.html

    if not _is_on_domain(address_of(request.from_address), domain):
        raise PermissionDenied(
            f"from: the sender must be on this key's domain ({domain.name})", code=ErrorCode.SENDER_NOT_ALLOWED
        )
    if not domain.verified:
        raise ValidationFailed(f"The domain {domain.name} is not verified", code=ErrorCode.DOMAIN_NOT_VERIFIED)
    # The domain was read with the key, in this request; the global switch is read below.
    if domain.sending_paused:
        raise SendingPaused(PAUSED_MESSAGE)

    message = Message(
        domain=domain,
        direction=Direction.SENT,
        status=Status.ACCEPTED,
        from_address=request.from_address,
        to=request.to,
        cc=request.cc,
        bcc=request.bcc,
        reply_to=request.reply_to,
        subject=subject or "",
        text=text,
        html=html,
        template=version.template if version else None,
        template_version=version.number if version else None,
        next_attempt_at=timezone.now(),
        is_test=is_test,
    )
    if is_test:
        _store_test(message)
    elif connection.vendor == "postgresql":
        _store_in_one_statement(domain, message)
    else:
        _store_in_transaction(domain, message)
    transaction.on_commit(lambda: dispatch_enqueue(public_id=message.public_id))
    return message


def _store_in_transaction(domain: Domain, message: Message) -> None:
    """The global pause check, then the allowance count and the two rows in one transaction."""
    if global_sending_paused():
        raise SendingPaused(PAUSED_MESSAGE)
    with transaction.atomic():
        allowance_consume(domain=domain)
        message.save(force_insert=True)
        MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)


def _store_test(message: Message) -> None:
    """A test message: the global pause applies as to live ones; no allowance is counted."""
    if global_sending_paused():
        raise SendingPaused(PAUSED_MESSAGE)
    with transaction.atomic():
        message.save(force_insert=True)
        MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)


def _store_in_one_statement(domain: Domain, message: Message) -> None:
    """_store_in_transaction as one statement on PostgreSQL, as atomic as the transaction.

    The global pause check, the allowance count (allowance_consume's conditional UPDATE) and the
    message and event INSERTs in one data-modifying CTE: one round trip instead of six (pause
    SELECT, BEGIN, UPDATE, INSERT, INSERT, COMMIT) and no ORM query compilation, which were most
    of a send's cost beyond the framework's in the accept benchmark
    (bench/results/before-after-accept.md). The pause is read in the statement that stores the
    message, so a pause committed before it applies. Nothing is written unless the counter row
    was updated: paused, allowance used up, or no row yet for the day (the day's first send,
    which creates it and tries once more).
    """
    now = timezone.now()
    limited = domain.daily_allowance is not None
    event = MessageEvent(type=EventType.ACCEPTED)
    params = [
        domain.pk,
        now.date(),
        *([domain.daily_allowance] if limited else []),
        *insert_values(message, insert_fields(Message)),
        *insert_values(event, insert_fields(MessageEvent, exclude=_EVENT_OWN_COLUMNS)),
    ]
    for first_try in (True, False):
        with connection.cursor() as cursor:
            cursor.execute(_accept_statement(limited=limited), params)
            paused, message_pk = cursor.fetchone()
        if paused:
            raise SendingPaused(PAUSED_MESSAGE)
        if message_pk is not None:
            message.pk = message_pk
            message._state.adding, message._state.db = False, connection.alias
            return
        if first_try:
            allowance_day_open(domain=domain, day=now.date())
    raise allowance_exhausted(domain=domain, now=now)


_EVENT_OWN_COLUMNS = frozenset({"message"})  # the statement takes it from the message INSERT


@cache
def _accept_statement(*, limited: bool) -> str:
    """The statement of _store_in_one_statement; parameters: domain id, day, [allowance], the
    message's insert_values, the event's (without its message). Returns (paused, message id or NULL)."""
    quote = connection.ops.quote_name
    message_columns = [quote(column.column) for column in insert_fields(Message)]
    event_columns = [quote(column.column) for column in insert_fields(MessageEvent, exclude=_EVENT_OWN_COLUMNS)]
    allowance = ' AND "sent_count" < %s' if limited else ""
    # Only the models' own identifiers are interpolated; every value is a parameter.
    return (
        f"WITH control AS (SELECT EXISTS (SELECT 1 FROM {quote(SendingControl._meta.db_table)} "  # noqa: S608
        'WHERE "id" = 1 AND "paused") AS paused), '
        f'counted AS (UPDATE {quote(DailyUsage._meta.db_table)} SET "sent_count" = "sent_count" + 1 '
        f'WHERE "domain_id" = %s AND "day" = %s{allowance} AND NOT (SELECT paused FROM control) RETURNING 1), '
        f"message AS (INSERT INTO {quote(Message._meta.db_table)} ({', '.join(message_columns)}) "
        f'SELECT {", ".join(["%s"] * len(message_columns))} FROM counted RETURNING "id"), '
        f"event AS (INSERT INTO {quote(MessageEvent._meta.db_table)} "
        f'("message_id", {", ".join(event_columns)}) SELECT message.id, {", ".join(["%s"] * len(event_columns))} '
        "FROM message) "
        "SELECT (SELECT paused FROM control), (SELECT id FROM message)"
    )

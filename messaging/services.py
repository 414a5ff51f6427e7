from dataclasses import dataclass, field
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from domains.models import Domain
from domains.sending import global_paused, send_refusal, sending_paused_error
from domains.services import allowance_consume
from mailservice.errors import ApiError, ErrorCode, PermissionDenied, ValidationFailed
from mailservice.mailbox import InvalidAddress, display_domains, parse_address
from messaging import sql
from messaging.feedback_id import feedback_id
from messaging.models import Direction, EventType, Message, MessageEvent, Status
from messaging.outbound.tasks import dispatch_enqueue
from templates_app.models import TemplateVersion
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


def _is_on_domain(mailbox: str, domain: Domain) -> bool:
    """The sender's canonical domain is the key's (a Unicode domain matches its stored A-label form).
    An address that cannot be sent as written (a submitted From: the API refuses those earlier) is on no domain."""
    try:
        return parse_address(mailbox).domain == domain.name
    except InvalidAddress:
        return False


def message_send(*, domain: Domain, request: SendRequest, is_test: bool = False, api_key_name: str = "") -> Message:
    """Store an outbound message as `accepted`, after every check of the spec, in its order.

    Nothing is stored when any check fails. Dispatch starts only once the row is committed. A test
    key's message (`is_test`) passes the same checks but does not count against the allowance;
    dispatch simulates its outcome instead of handing it to SMTP (messaging/outbound/sandbox.py).
    """
    versions = _TemplateVersions(domain)
    message = _message_of(domain=domain, request=request, is_test=is_test, versions=versions, api_key_name=api_key_name)
    send_permitted(domain=domain, from_address=request.from_address)
    return message_store(domain=domain, message=message)


def message_send_batch(
    *, domain: Domain, requests: list[SendRequest], is_test: bool = False, api_key_name: str = ""
) -> list[Message]:
    """Store every message of a batch as `accepted`, or none: POST /v1/send/batch.

    The checks are a single send's, in its order: each item's template and sender, in item order
    (a refusal names the item: `messages.3.from: …`), then the domain's own (verified, paused)
    once, then the global pause and the allowance, which must hold every live message of the batch.
    The messages and their events are stored in one transaction, one INSERT each, and dispatch
    starts at its commit, each message with its own events as a single send's."""
    versions = _TemplateVersions(domain)
    messages = []
    for index, request in enumerate(requests):
        try:
            messages.append(
                _message_of(
                    domain=domain, request=request, is_test=is_test, versions=versions, api_key_name=api_key_name
                )
            )
            _sender_check(domain=domain, from_address=request.from_address)
        except ApiError as exc:
            raise ApiError(f"messages.{index}.{exc.message}", code=exc.code, headers=exc.headers) from None
    refusal = send_refusal(domain=domain)
    if refusal is not None:
        raise refusal
    return messages_store(domain=domain, messages=messages)


class _TemplateVersions:
    """The published template versions a request's sends use, each looked up once per request."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.found: dict[tuple[str, int | None], TemplateVersion] = {}

    def get(self, reference: TemplateReference) -> TemplateVersion:
        wanted = (reference.id, reference.version)
        if wanted not in self.found:
            self.found[wanted] = template_version_for_send(
                domain=self.domain, reference=reference.id, version=reference.version
            )
        return self.found[wanted]


def _message_of(
    *, domain: Domain, request: SendRequest, is_test: bool, versions: _TemplateVersions, api_key_name: str
) -> Message:
    """The unsaved `accepted` message a send request makes, its template rendered (400 when it cannot be),
    with the Feedback-ID it goes out with (the key that sent it: `api_key_name`)."""
    subject, text, html, version = request.subject, request.text, request.html, None
    if request.template is not None:
        version = versions.get(request.template)
        rendered = template_render(version=version, variables=request.template.variables, subject=request.subject)
        subject, text, html = rendered.subject, rendered.text, rendered.html
    return Message(
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
        feedback_id=feedback_id(
            template_slug=version.template.slug if version else None, api_key_name=api_key_name, domain_name=domain.name
        ),
    )


def send_permitted(*, domain: Domain, from_address: str) -> None:
    """The checks every send makes before storing, in the spec's order: the sender on the key's
    domain (403), the domain verified (400), the domain's own pause (503).

    `domain` is the one read with the key in this request; the global switch is checked by
    message_store, in the statement that stores the message."""
    _sender_check(domain=domain, from_address=from_address)
    refusal = send_refusal(domain=domain)
    if refusal is not None:
        raise refusal


class DisplayNameRefused(ValidationFailed):
    """A display name showing an address in another domain than the sender's (SMTP submission: 550 5.7.1)."""


def _sender_check(*, domain: Domain, from_address: str) -> None:
    """403 SenderNotAllowed unless the sender is on the key's domain; 400 when its display name shows an
    address in another domain, which readers would take for the sender (`"ceo@victim.test" <app@acme.test>`)."""
    if not _is_on_domain(from_address, domain):
        raise PermissionDenied(
            f"from: the sender must be on this key's domain ({domain.name})", code=ErrorCode.SENDER_NOT_ALLOWED
        )
    shown = next((name for name in display_domains(from_address) if name != domain.name), None)
    if shown is not None:
        raise DisplayNameRefused(
            f"from: the display name shows an address in {shown}, another domain than the sender's ({domain.name})"
        )


def message_store(*, domain: Domain, message: Message) -> Message:
    """Store an unsaved `accepted` message of `domain` with its `accepted` event, counted against
    the daily allowance (429; a test message, `message.is_test`, never is) unless sending is paused
    globally (503); dispatch starts on commit.

    The sandbox is read from the message itself, not passed beside it, so no path can store a test
    key's message as live by leaving an argument out (SMTP submission once did).

    On PostgreSQL the storing statement itself wakes the workers' dispatch loops at commit; a
    Celery task is queued instead for the ORM twins, and when tasks run eagerly (no broker: no workers)."""
    notifies = not message.is_test and sql.available()
    if message.is_test:
        _store_test(message)
    elif notifies:
        sql.message_send_in_one_statement(domain, message)
    else:
        _store_in_transaction(domain, message)
    if not notifies or settings.CELERY_TASK_ALWAYS_EAGER:
        transaction.on_commit(lambda: dispatch_enqueue(public_id=message.public_id))
    return message


def _store_in_transaction(domain: Domain, message: Message) -> None:
    """The global pause check, then the allowance count and the two rows in one transaction
    (sql.message_send_in_one_statement does the same in one statement on PostgreSQL)."""
    if global_paused():
        raise sending_paused_error()
    with transaction.atomic():
        allowance_consume(domain=domain)
        message.save(force_insert=True)
        MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)


def _store_test(message: Message) -> None:
    """A test message (sandbox key): the global pause applies as to live ones; no allowance is counted."""
    if global_paused():
        raise sending_paused_error()
    with transaction.atomic():
        message.save(force_insert=True)
        MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)


def messages_store(*, domain: Domain, messages: list[Message]) -> list[Message]:
    """Store unsaved `accepted` messages of `domain` with their `accepted` events, all or none: the
    global pause (503), then the allowance counted for every live message at once (429), then one
    INSERT of the messages and one of their events, in one transaction; dispatch starts on commit.

    On PostgreSQL the two INSERTs are one statement, which also wakes the workers' dispatch loops once
    for the lot (a NOTIFY, delivered at commit) instead of a task per message; a task per message is
    queued only where nothing listens (the ORM twin, or tasks run eagerly), as message_store does."""
    if global_paused():
        raise sending_paused_error()
    live = sum(not message.is_test for message in messages)
    notifies = sql.available()
    with transaction.atomic():
        if live:
            allowance_consume(domain=domain, count=live)
        if notifies:
            sql.messages_insert_in_one_statement(messages)
        else:
            Message.objects.bulk_create(messages)
            MessageEvent.objects.bulk_create(
                [
                    MessageEvent(message=message, domain=domain, is_test=message.is_test, type=EventType.ACCEPTED)
                    for message in messages
                ]
            )
    if not notifies or settings.CELERY_TASK_ALWAYS_EAGER:
        transaction.on_commit(partial(_enqueue_each, [message.public_id for message in messages]))
    return messages


def _enqueue_each(public_ids: list[str]) -> None:
    for public_id in public_ids:
        dispatch_enqueue(public_id=public_id)

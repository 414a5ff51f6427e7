"""What the inbound SMTP server does with mail: route recipients, store received mail, apply reports.

Three kinds of recipient are accepted:
- an address on a verified domain: the mail is stored as a `received` message of that domain;
- the VERP return path `bounces+<message id>@<return-path domain>`: the mail is a bounce or a
  complaint about that sent message;
- any other address at the return-path domain (e.g. the address registered with a provider's
  feedback loop): a report matched to a sent message by the Message-ID it quotes.
Everything else is refused at RCPT, so the server never relays.
"""

import logging
from contextlib import nullcontext
from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from domains.models import Domain
from domains.safeguards import safeguard_check
from mailservice import metrics
from mailservice.mailbox import address_of
from messaging.inbound.parsing import ReceivedMail, parse_received
from messaging.inbound.reports import Outcome, RecipientReport, Report, classify
from messaging.inserts import insert_fields, insert_values
from messaging.models import Direction, EventType, Message, MessageEvent, Status, SuppressionReason
from messaging.suppressions import suppression_add

logger = logging.getLogger(__name__)

VERP_PREFIX = "bounces"


class RouteKind(StrEnum):
    RECEIVED = "received"
    REPORT = "report"
    REFUSED = "refused"


@dataclass(frozen=True)
class Route:
    kind: RouteKind
    domain: Domain | None = None  # the receiving domain (RECEIVED)
    verp_id: str = ""  # the message id in a VERP address (REPORT)


def _split(address: str) -> tuple[str, str]:
    local, _, domain = address.strip().strip("<>").rpartition("@")
    return local, domain.rstrip(".").lower()


def _return_path_domain() -> str:
    return (settings.MAILSERVICE_RETURN_PATH_DOMAIN or "").lower()


def _route_by_address(local: str, domain_name: str) -> Route | None:
    """The route the address alone decides (malformed, or a VERP return path); None when its domain decides."""
    if not local or not domain_name:
        return Route(RouteKind.REFUSED)
    tag, plus, verp_id = local.lower().partition("+")
    if domain_name == _return_path_domain() and tag == VERP_PREFIX:
        return Route(RouteKind.REPORT, verp_id=verp_id if plus else "")
    return None


def _route_off_verified_domains(domain_name: str) -> Route:
    """The route of an address whose domain is not a verified domain."""
    return Route(RouteKind.REPORT) if domain_name == _return_path_domain() else Route(RouteKind.REFUSED)


def recipient_route(*, address: str) -> Route:
    local, domain_name = _split(address)
    route = _route_by_address(local, domain_name)
    if route is not None:
        return route
    domain = Domain.objects.filter(name=domain_name, verified=True).first()
    if domain is not None:
        return Route(RouteKind.RECEIVED, domain=domain)
    return _route_off_verified_domains(domain_name)


def _received_message(*, recipients: list[str], envelope_from: str, parsed: ReceivedMail, raw: bytes) -> Message:
    """A received message, unsaved and without its domain yet."""
    return Message(
        direction=Direction.RECEIVED,
        status=Status.RECEIVED,
        from_address=parsed.from_address or envelope_from,
        to=recipients,
        subject=parsed.subject,
        text=parsed.text,
        message_id_header=parsed.message_id[:255],
        envelope_from=envelope_from,
        raw=raw,
    )


def _received_detail(envelope_from: str) -> str:
    return f"envelope from <{envelope_from}>"


def _save_received(message: Message, *, domain: Domain) -> Message:
    message.domain = domain
    message.save(force_insert=True)
    MessageEvent.objects.create(
        message=message, type=EventType.RECEIVED, detail=_received_detail(message.envelope_from)
    )
    return message


def _store_received(*, domain: Domain, recipients: list[str], envelope_from: str, raw: bytes) -> Message:
    parsed = parse_received(raw)
    message = _received_message(recipients=recipients, envelope_from=envelope_from, parsed=parsed, raw=raw)
    return _save_received(message, domain=domain)


def _store_on_verified_domains(*, by_domain: dict[str, list[str]], envelope_from: str, raw: bytes) -> set[str]:
    """One received message for each domain in `by_domain` (name: its recipients) that is verified at
    this moment; the names of those domains. Atomic: all of them are stored, or none."""
    if not by_domain:
        return set()
    parsed = parse_received(raw)
    messages = {
        name: _received_message(recipients=addresses, envelope_from=envelope_from, parsed=parsed, raw=raw)
        for name, addresses in by_domain.items()
    }
    if connection.vendor == "postgresql":
        return _store_in_one_statement(messages, detail=_received_detail(envelope_from))
    with transaction.atomic():
        domains = list(Domain.objects.filter(name__in=messages, verified=True))
        for domain in domains:
            _save_received(messages[domain.name], domain=domain)
    return {domain.name for domain in domains}


def _store_in_one_statement(messages: dict[str, Message], *, detail: str) -> set[str]:
    """_store_on_verified_domains as one statement on PostgreSQL: the domain check and the INSERTs of the
    messages and of their events in a data-modifying CTE, atomic on its own, so one round trip instead of
    five (the domain query, BEGIN, two INSERTs, COMMIT). The messages differ only in public id and recipients."""
    quote = connection.ops.quote_name
    per_row = [Message._meta.get_field("public_id"), Message._meta.get_field("to")]
    # Every other column Django would insert, with the value it would (defaults and auto_now included).
    shared = insert_fields(Message, exclude=frozenset({"domain", "public_id", "to"}))
    shared_values = insert_values(next(iter(messages.values())), shared)
    rows = [[name, *insert_values(message, per_row)] for name, message in messages.items()]
    columns = ", ".join(quote(field.column) for field in [Message._meta.get_field("domain"), *per_row, *shared])
    now = timezone.now()
    # Only the models' own identifiers and placeholders are interpolated; every value is a parameter.
    sql = (
        f"WITH recipient (domain_name, public_id, addresses) AS (VALUES {', '.join(['(%s, %s, %s)'] * len(rows))}), "  # noqa: S608
        f"message AS (INSERT INTO {quote(Message._meta.db_table)} ({columns}) "
        f"SELECT domain.id, recipient.public_id, recipient.addresses, {', '.join(['%s'] * len(shared))} "
        f"FROM recipient JOIN {quote(Domain._meta.db_table)} AS domain "
        "ON domain.name = recipient.domain_name AND domain.verified RETURNING id, public_id), "
        f"event AS (INSERT INTO {quote(MessageEvent._meta.db_table)} "
        '("message_id", "type", "recipient", "detail", "created_at", "updated_at") '
        "SELECT message.id, %s, '', %s, %s, %s FROM message) "
        "SELECT public_id FROM message"
    )
    params = [value for row in rows for value in row] + shared_values + [EventType.RECEIVED, detail, now, now]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        stored = {public_id for (public_id,) in cursor.fetchall()}
    return {name for name, message in messages.items() if message.public_id in stored}


def _reported_message(*, verp_id: str, original_message_id: str) -> Message | None:
    sent = Message.objects.select_related("domain").filter(direction=Direction.SENT)
    if verp_id:
        found = sent.filter(public_id=verp_id).first()
        if found is not None:
            return found
    if not original_message_id:
        return None
    # Our Message-IDs are <{public_id}@{sender domain}>, so the id also finds it if the header was rewritten.
    public_id = original_message_id.strip("<>").partition("@")[0].lower()
    return (
        sent.filter(message_id_header__iexact=original_message_id).first() or sent.filter(public_id=public_id).first()
    )


def _recipients_of(message: Message) -> list[str]:
    return [address_of(mailbox).lower() for mailbox in message.to + message.cc + message.bcc]


def _affected_recipient(message: Message, reported: str) -> str:
    """The report's address if it was a recipient; a one-recipient message's recipient if redacted or rewritten."""
    recipients = _recipients_of(message)
    if reported in recipients or len(recipients) != 1:
        return reported
    return recipients[0]


_NEXT_STATUS = {
    Outcome.BOUNCE: (Status.BOUNCED, [Status.ACCEPTED, Status.DELIVERED]),
    Outcome.COMPLAINT: (Status.COMPLAINED, [Status.ACCEPTED, Status.DELIVERED, Status.BOUNCED]),
}
_EVENT = {Outcome.BOUNCE: EventType.BOUNCED, Outcome.DELAY: EventType.DELAYED, Outcome.COMPLAINT: EventType.COMPLAINED}
_SUPPRESSION_REASON = {Outcome.BOUNCE: SuppressionReason.BOUNCE, Outcome.COMPLAINT: SuppressionReason.COMPLAINT}


def _apply(*, message: Message, recipient: RecipientReport) -> None:
    address = _affected_recipient(message, recipient.address)
    MessageEvent.objects.create(
        message=message, type=_EVENT[recipient.outcome], recipient=address, detail=recipient.detail
    )
    if recipient.outcome in _NEXT_STATUS:
        status, from_statuses = _NEXT_STATUS[recipient.outcome]
        changed = Message.objects.filter(pk=message.pk, status__in=from_statuses).update(
            status=status, updated_at=timezone.now()
        )
        metrics.report_applied(domain=message.domain.name, status=status, changed=bool(changed))
        if address:
            suppression_add(
                domain=message.domain,
                address=address,
                reason=_SUPPRESSION_REASON[recipient.outcome],
                source_message=message,
                detail=recipient.detail,
            )


def report_process(*, report: Report, verp_id: str, envelope_from: str, report_address: str, raw: bytes) -> None:
    """Apply a bounce, delay or complaint to the sent message it is about.

    A report about no message we know is logged and dropped: there is nothing to update and no
    domain to show it to. Mail about a known message that is not a report (a vacation reply sent
    to the return path, a bounce too broken to read) is kept as received mail of that domain.
    """
    message = _reported_message(verp_id=verp_id, original_message_id=report.original_message_id)
    if message is None:
        logger.warning(
            "inbound: %s report to %s matches no sent message (Message-ID %r); dropped",
            report.kind,
            report_address,
            report.original_message_id,
        )
        return
    if not report.recipients:
        kept = _store_received(domain=message.domain, recipients=[report_address], envelope_from=envelope_from, raw=raw)
        logger.info("inbound: mail to %s about %s is not a report; kept as %s", report_address, message, kept)
        return
    for recipient in report.recipients:
        _apply(message=message, recipient=recipient)
    if report.kind != Outcome.DELAY:
        safeguard_check(domain=message.domain)


def inbound_deliver(*, envelope_from: str, recipients: list[str], raw: bytes) -> list[str]:
    """Everything one accepted SMTP transaction leads to, atomically: all of it is stored, or none.

    The recipients are routed again, by the write that stores their mail: their domains may have
    changed since RCPT. Returns the recipients it was not for, because their domain is no longer verified.
    """
    by_domain: dict[str, list[str]] = {}  # recipients routed by their domain, by domain name
    verp_ids: dict[str, str] = {}  # one report per VERP id, even if several of its addresses were recipients
    for address in recipients:
        local, domain_name = _split(address)
        route = _route_by_address(local, domain_name)
        if route is None:
            by_domain.setdefault(domain_name, []).append(address)
        elif route.kind == RouteKind.REPORT:
            verp_ids.setdefault(route.verp_id, address)
    refused: list[str] = []
    # Received mail alone is stored by one atomic statement; reports take several, in a transaction.
    with transaction.atomic() if verp_ids or _return_path_domain() in by_domain else nullcontext():
        stored = _store_on_verified_domains(by_domain=by_domain, envelope_from=envelope_from, raw=raw)
        for domain_name, addresses in by_domain.items():
            if domain_name in stored:
                continue
            if _route_off_verified_domains(domain_name).kind == RouteKind.REPORT:
                for address in addresses:
                    verp_ids.setdefault("", address)
            else:
                refused += addresses
        if verp_ids:
            report = classify(raw)
            for verp_id, address in verp_ids.items():
                report_process(
                    report=report, verp_id=verp_id, envelope_from=envelope_from, report_address=address, raw=raw
                )
    return refused

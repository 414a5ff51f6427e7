"""What the inbound SMTP server does with mail: store received mail, apply reports. Which recipients are
accepted, and as what, is routing.py's.

A report only changes the state of a recipient whose delivery it proves (`_proven_recipient`):
- at a recipient's own signed return path (`bounces+<id>.<index>.<tag>@`), that recipient, whatever
  addresses the report names; an entry naming another recipient of the message is ignored;
- at the per-message return path (signed or unsigned: mail sent before per-recipient return paths)
  or matched by the Message-ID it quotes (a report to `fbl@`, `postmaster@`, ...), the message's
  recipient if it had exactly one, and only an entry naming it or redacting the address: a
  Message-ID is seen by every recipient, so for a message with several it proves nothing about which.
A report that proves nothing (or names only addresses it does not prove) is stored as received
mail of the message's domain, with the reason in its event, and acted on in no way. Applying the
same report twice changes nothing the second time.
Per recipient: a complaint suppresses the address for good; a bounce is classified by the classifier
dispatch's refusals go through too (messaging/refusals.py), whose verdict decides hard or soft (the
event's type and bounce_type) and goes through the same policy (messaging/bounces.py): only the
recipient's own permanent failures suppress it for good, and a soft one counts toward
MAILSERVICE_SOFT_BOUNCE_LIMIT.
The message's status follows one rule (`_status_from_recipients`): `complained` as soon as any
recipient complained; `bounced` once no recipient can have received it (each one bounced hard,
was refused by the relay, or was skipped as suppressed); otherwise it keeps its status.
"""

import logging
import time
from contextlib import nullcontext, suppress
from dataclasses import dataclass
from email.message import Message as EmailMessage
from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from domains.models import Domain
from mailservice import metrics
from mailservice.mailbox import InvalidAddress, comparison_key, parse_address
from messaging import sql
from messaging.bounces import bounce_apply
from messaging.inbound.aggregate.services import aggregate_receive
from messaging.inbound.aggregate.tasks import aggregate_report_read_task
from messaging.inbound.feedback_loops import FeedbackLoopTrust, feedback_loop_trust
from messaging.inbound.reports import NOT_A_REPORT, RecipientReport, Report, ReportedOutcome, classify_message
from messaging.inbound.reports.reading import LINE_LIMIT
from messaging.inbound.reports.status_codes import SMTP_REPLY
from messaging.inbound.routing import (
    NO_VERP,
    RouteKind,
    address_split,
    return_path_domain,
    route_by_address,
    route_off_verified_domains,
)
from messaging.models import (
    SUBMITTED,
    AggregateKind,
    Direction,
    EventType,
    Message,
    MessageEvent,
    Status,
    SuppressionReason,
    message_by_public_id,
)
from messaging.refusals import NO_FAILURE, Speaker, Verdict, classify_refusal
from messaging.rfc5322.parsing import ParseBudgetExceeded, ReceivedMail, parse_bytes, received_fields
from messaging.safeguards import safeguard_check
from messaging.suppressions import suppression_add
from messaging.verp import UNSIGNED_GRACE, VerpId

logger = logging.getLogger(__name__)
# What is parsed of a message: its headers, text and any report come first, so only its first
# bytes are read (the raw source is always stored whole). Parsing all of a 20 MiB attachment cost
# ten times its size in memory and seconds of CPU for fields nobody reads.
PARSE_BYTES = 2 * 1024 * 1024


@dataclass(frozen=True)
class ParsedMail:
    """What one parse of a message yields: the fields a received message stores, and the report it is."""

    received: ReceivedMail
    report: Report
    parsed: bool = True  # False: over the parsing budget, stored raw with the envelope's fields only


def inbound_parse(*, raw: bytes, envelope_from: str, deadline: float) -> ParsedMail:
    """Parse a message (its first PARSE_BYTES) once for both uses; past `deadline` (time.monotonic())
    it is left unparsed. UnparsableMessage (content no parser can read) propagates: the server
    refuses it for good.
    """
    try:
        message: EmailMessage = parse_bytes(raw[:PARSE_BYTES], deadline=deadline)
        received = received_fields(message)
        if time.monotonic() > deadline:
            raise ParseBudgetExceeded
        return ParsedMail(received, classify_message(message))
    except ParseBudgetExceeded:
        budget = settings.MAILSERVICE_INBOUND_PARSE_SECONDS
        logger.warning("inbound: %d bytes from <%s> not parsed within %ss; stored raw", len(raw), envelope_from, budget)
        return ParsedMail(ReceivedMail(envelope_from, "", None, ""), NOT_A_REPORT, parsed=False)


def _received_message(*, recipients: list[str], envelope_from: str, parsed: ParsedMail, raw: bytes) -> Message:
    """A received message, unsaved and without its domain yet."""
    return Message(
        direction=Direction.RECEIVED,
        status=Status.RECEIVED,
        from_address=parsed.received.from_address or envelope_from,
        to=recipients,
        subject=parsed.received.subject,
        text=parsed.received.text,
        message_id_header=parsed.received.message_id[:255],
        envelope_from=envelope_from,
        raw=raw,
    )


def _received_detail(envelope_from: str, parsed: ParsedMail, note: str = "") -> str:
    detail = f"envelope from <{envelope_from}>" + (f"; {note}" if note else "")
    if parsed.parsed:
        return detail
    budget = settings.MAILSERVICE_INBOUND_PARSE_SECONDS
    return f"{detail}; unparsed: over the {budget:g} s parsing budget, raw source kept"


def _store_received(
    *, domain: Domain, recipients: list[str], envelope_from: str, parsed: ParsedMail, raw: bytes, note: str = ""
) -> Message:
    message = _received_message(recipients=recipients, envelope_from=envelope_from, parsed=parsed, raw=raw)
    message.domain = domain
    message.save(force_insert=True)
    MessageEvent.objects.create(
        message=message, type=EventType.RECEIVED, detail=_received_detail(envelope_from, parsed, note)
    )
    return message


def _store_on_verified_domains(
    *, by_domain: dict[str, list[str]], envelope_from: str, parsed: ParsedMail, raw: bytes
) -> set[str]:
    """One received message for each domain in `by_domain` (name: its recipients) that is verified at
    this moment; the names of those domains. Atomic: all of them are stored, or none."""
    if not by_domain:
        return set()
    if sql.available():
        messages = {
            name: _received_message(recipients=addresses, envelope_from=envelope_from, parsed=parsed, raw=raw)
            for name, addresses in by_domain.items()
        }
        return sql.inbound_store_in_one_statement(messages, detail=_received_detail(envelope_from, parsed))
    with transaction.atomic():
        domains = list(Domain.objects.filter(name__in=by_domain, verified=True))
        for domain in domains:
            _store_received(
                domain=domain, recipients=by_domain[domain.name], envelope_from=envelope_from, parsed=parsed, raw=raw
            )
    return {domain.name for domain in domains}


def _reported_message(*, verp: VerpId, original_message_id: str) -> Message | None:
    """The sent message a report is about, locked until the transaction ends (reports about one
    message are applied one at a time, so a duplicate sees what the first one did)."""
    sent = Message.objects.select_related("domain").select_for_update(of=("self",)).filter(direction=Direction.SENT)
    if verp.public_id:
        named = sent
        if not verp.signed:  # the unsigned form of mail sent before the tag existed (messaging.verp)
            accepted = settings.MAILSERVICE_VERP_ACCEPT_UNSIGNED
            named = named.filter(created_at__gte=timezone.now() - UNSIGNED_GRACE) if accepted else named.none()
        found = message_by_public_id(named, verp.public_id)
        if found is not None:
            return found
    if not original_message_id:
        return None
    # Mail submitted over SMTP keeps its own Message-ID: found by message_id_header_idx, whose condition
    # (SUBMITTED) is stated so the planner can use it. The API's are <{public_id}@{sender
    # domain}>, so the public id finds those, also when the header was rewritten.
    by_header = sent.filter(SUBMITTED, message_id_header__iexact=original_message_id)
    public_id = original_message_id.strip("<>").partition("@")[0].lower()
    # No ORDER BY (first() would sort by id): on partitioned messages that ordering reads every partition's
    # primary key in id order instead of the Message-ID index.
    return next(iter(by_header.order_by()[:1]), None) or message_by_public_id(sent, public_id)


def _recipients_of(message: Message) -> list[str]:
    """The envelope recipients' suppression keys (`Address.key`, each once), the form reports are
    compared under: To, Cc and Bcc, or a submission's own envelope."""
    recipients = []
    for mailbox in message.envelope_mailboxes:
        with suppress(InvalidAddress):  # stored before the API refused it: never sent, never reported
            recipients.append(parse_address(mailbox).key)
    return list(dict.fromkeys(recipients))


@dataclass(frozen=True)
class Proof:
    """Whose delivery a report proves: `recipient` ('' for none), and whether the proof is the
    recipient's own return path (then every entry is about it) rather than the message alone."""

    recipient: str
    by_return_path: bool
    why_not: str = ""  # when it proves no recipient: why, for the stored report's event


def _proven_recipient(verp: VerpId, recipients: list[str]) -> Proof:
    if verp.recipient_index is not None:
        if verp.recipient_index < len(recipients):
            return Proof(recipients[verp.recipient_index], by_return_path=True)
        return Proof(
            "", by_return_path=True, why_not="report not applied: its return path names no recipient of the message"
        )
    if len(recipients) == 1:
        return Proof(recipients[0], by_return_path=False)
    return Proof(
        "",
        by_return_path=False,
        why_not=f"report not applied: it reached no recipient's own return path and the message had "
        f"{len(recipients)} recipients, so it proves none of them",
    )


def _affected_recipient(recipients: list[str], proof: Proof, reported: str) -> str | None:
    """The recipient a report's entry (naming `reported`, '' when the report redacts it) may change:
    the proven one, if the entry names it, redacts it, or (at its own return path) names no other
    recipient of the message; else None."""
    if not proof.recipient:
        return None
    named = comparison_key(reported) if reported else ""
    if not named or named == proof.recipient:
        return proof.recipient
    if proof.by_return_path and named not in recipients:
        return proof.recipient  # e.g. the address it was forwarded to: the return path says whose delivery it was
    return None


_EVENT = {
    ReportedOutcome.BOUNCE: EventType.BOUNCED,
    ReportedOutcome.SOFT_BOUNCE: EventType.SOFT_BOUNCED,
    ReportedOutcome.DELAY: EventType.DELAYED,
    ReportedOutcome.COMPLAINT: EventType.COMPLAINED,
}
_BOUNCES = {ReportedOutcome.BOUNCE, ReportedOutcome.SOFT_BOUNCE}
# Recipient events meaning the recipient did not get the message.
_UNDELIVERED = {EventType.BOUNCED, EventType.RECIPIENT_REJECTED, EventType.SUPPRESSED}


def report_verdict(recipient: RecipientReport) -> Verdict:
    """Why the receiver refused or deferred, from the report's status and the reply its diagnostic quotes
    ("smtp; 550 5.7.515 Access denied ..."), as a refusal of the same reply during SMTP would be judged;
    a complaint has no reason. A bounce whose status or reply is missing is still a failure: a 5.0.0
    (or 4.0.0) stands in, so the words decide the reason."""
    if recipient.outcome == ReportedOutcome.COMPLAINT:
        return NO_FAILURE
    quoted = SMTP_REPLY.search(recipient.diagnostic[:LINE_LIMIT])
    code = int(quoted.group(1)) if quoted else None
    status = recipient.status
    if code is None and not status:
        status = "5.0.0" if recipient.outcome == ReportedOutcome.BOUNCE else "4.0.0"
    gave_up = recipient.outcome == ReportedOutcome.SOFT_BOUNCE
    return classify_refusal(code, status, recipient.diagnostic, Speaker.RECEIVER, gave_up=gave_up)


def _event_type(recipient: RecipientReport, verdict: Verdict) -> str:
    """The event of one recipient's outcome; a final failure is a bounce, hard or soft as the verdict says."""
    if recipient.outcome in _BOUNCES:
        return EventType.BOUNCED if verdict.hard else EventType.SOFT_BOUNCED
    return _EVENT[recipient.outcome]


def _apply(*, message: Message, address: str, recipient: RecipientReport, trust: FeedbackLoopTrust | None) -> bool:
    """Record one recipient's outcome; False when the same outcome was already recorded for it. A
    complaint records whether it came from a trusted feedback loop (`trust`), and says so in its detail."""
    verdict = report_verdict(recipient)
    event_type = _event_type(recipient, verdict)
    if MessageEvent.objects.filter(message=message, type=event_type, recipient=address).exists():
        return False
    feedback = f"feedback-type: {recipient.feedback_type}" if recipient.feedback_type else ""
    authenticated = None
    if recipient.outcome == ReportedOutcome.COMPLAINT and trust is not None:
        authenticated, feedback = trust.trusted, "; ".join(part for part in (feedback, trust.why) if part)
    MessageEvent.objects.create(
        message=message,
        type=event_type,
        recipient=address,
        detail=f"{recipient.diagnostic or feedback}{verdict.note(message.domain.name)}",
        enhanced_status=recipient.status[:16],
        diagnostic=recipient.diagnostic,
        bounce_type=verdict.bounce_type if recipient.outcome in _BOUNCES else "",
        feedback_type=recipient.feedback_type[:32],
        cause=verdict.cause,
        fix_check=verdict.check,
        reason=verdict.reason,
        complaint_authenticated=authenticated,
    )
    metrics.report_recorded(domain=message.domain.name, outcome=recipient.outcome)
    if recipient.outcome == ReportedOutcome.COMPLAINT:
        suppression_add(
            domain=message.domain,
            address=address,
            reason=SuppressionReason.COMPLAINT,
            source_message=message,
            detail=recipient.detail,
        )
    elif recipient.outcome in _BOUNCES:
        bounce_apply(message=message, address=address, verdict=verdict, detail=recipient.detail)
    return True


def _status_from_recipients(message: Message) -> None:
    """The documented rule: `complained` when any recipient complained; `bounced` when no recipient
    can have received the message; else the status stays as it is (delivered, accepted)."""
    recipients = _recipients_of(message)
    outcomes = message.events.filter(recipient__gt="").values_list("type", "recipient")
    complained = any(kind == EventType.COMPLAINED for kind, _ in outcomes)
    undelivered = {comparison_key(address) for kind, address in outcomes if kind in _UNDELIVERED}
    hard_bounced = any(kind == EventType.BOUNCED for kind, _ in outcomes)
    if complained:
        status, before = Status.COMPLAINED, [Status.ACCEPTED, Status.DELIVERED, Status.BOUNCED]
    elif hard_bounced and undelivered.issuperset(recipients):
        status, before = Status.BOUNCED, [Status.ACCEPTED, Status.DELIVERED]
    else:
        return
    if Message.objects.filter(pk=message.pk, status__in=before).update(status=status, updated_at=timezone.now()):
        metrics.message_status(domain=message.domain.name, status=status)


def _quoted_verp(verp: VerpId, report: Report) -> VerpId:
    """A report at an address of the return-path domain with no return path of its own (`fbl@`,
    `postmaster@`) that quotes the original's Return-Path, as a headers-only ARF does: the signed return
    path it quotes, as if the report had reached it (whoever could quote it could address it). An unsigned
    or malformed one names nothing: the Message-ID it quotes is tried next, never a guess."""
    if verp.public_id or not report.original_return_path:
        return verp
    local, domain_name = address_split(report.original_return_path)
    route = route_by_address(local, domain_name)
    if route is None or route.kind != RouteKind.REPORT or not route.verp.signed:
        return verp
    return route.verp


def report_process(
    *,
    parsed: ParsedMail,
    verp: VerpId,
    envelope_from: str,
    report_address: str,
    raw: bytes,
    trust: FeedbackLoopTrust | None = None,
) -> None:
    """Apply a bounce, delay or complaint to the sent message it is about; a complaint with whether it
    came from a trusted feedback loop (`trust`, messaging/inbound/feedback_loops.py).

    A report about no message we know is logged and dropped: there is nothing to update and no
    domain to show it to. Mail about a known message that is not a report (a vacation reply sent
    to the return path, a bounce too broken to read, one over the parsing budget) is kept as
    received mail of that domain.
    """
    report = parsed.report
    verp = _quoted_verp(verp, report)
    message = _reported_message(verp=verp, original_message_id=report.original_message_id)
    if message is None:
        logger.warning(
            "inbound: %s report to %s matches no sent message (Message-ID %r); dropped",
            report.kind,
            report_address,
            report.original_message_id,
        )
        return
    if not report.recipients:
        kept = _store_received(
            domain=message.domain, recipients=[report_address], envelope_from=envelope_from, parsed=parsed, raw=raw
        )
        logger.info("inbound: mail to %s about %s is not a report; kept as %s", report_address, message, kept)
        return
    recipients = _recipients_of(message)
    proof = _proven_recipient(verp, recipients)
    matched = changed = False
    for recipient in report.recipients:
        address = _affected_recipient(recipients, proof, recipient.address)
        if address is None:
            logger.warning(
                "inbound: %s report about %s names %r, which it does not prove; ignored",
                recipient.outcome,
                message,
                recipient.address,
            )
            continue
        matched = True
        changed |= _apply(message=message, address=address, recipient=recipient, trust=trust)
    if not matched:
        why = proof.why_not or "report not applied: it names no recipient whose delivery it proves"
        kept = _store_received(
            domain=message.domain,
            recipients=[report_address],
            envelope_from=envelope_from,
            parsed=parsed,
            raw=raw,
            note=why,
        )
        logger.warning(
            "inbound: %s report to %s about %s: %s; kept as %s", report.kind, report_address, message, why, kept
        )
        return
    if changed and report.kind != ReportedOutcome.DELAY:
        _status_from_recipients(message)
        safeguard_check(domain=message.domain)


def inbound_deliver(
    *, envelope_from: str, recipients: list[str], raw: bytes, peer_ip: str = "", helo: str = ""
) -> list[str]:
    """Everything one accepted SMTP transaction leads to, atomically: all of it is stored, or none.
    A report mail to `dmarc-reports@` or `tls-reports@` is only kept here; its report is read by a
    task once this commits (messaging/inbound/aggregate/), with `peer_ip` and `helo` for its SPF check.

    The recipients are routed again, by the write that stores their mail: their domains may have
    changed since RCPT. Returns the recipients it was not for, because their domain is no longer verified.
    Raises UnparsableMessage for content no parser can read (the server refuses it for good).
    """
    parsed = inbound_parse(
        raw=raw, envelope_from=envelope_from, deadline=time.monotonic() + settings.MAILSERVICE_INBOUND_PARSE_SECONDS
    )
    by_domain: dict[str, list[str]] = {}  # recipients routed by their domain, by domain name
    verps: dict[VerpId, str] = {}  # one report per VERP id, even if several of its addresses were recipients
    aggregates: set[AggregateKind] = set()  # each kind once, however many of its addresses were recipients
    for address in recipients:
        local, domain_name = address_split(address)
        route = route_by_address(local, domain_name)
        if route is None:
            by_domain.setdefault(domain_name, []).append(address)
        elif route.kind == RouteKind.REPORT:
            verps.setdefault(route.verp, address)
        elif route.aggregate is not None:
            aggregates.add(route.aggregate)
    # Before the transaction: verifying a complaint's DKIM signature takes a DNS lookup.
    complaint = parsed.report.kind == ReportedOutcome.COMPLAINT
    trust = feedback_loop_trust(raw=raw, envelope_from=envelope_from) if complaint else None
    refused: list[str] = []
    # Received mail alone is stored by one atomic statement; reports take several, in a transaction.
    several = verps or aggregates or return_path_domain() in by_domain
    with transaction.atomic() if several else nullcontext():
        for kind in sorted(aggregates):
            mail = aggregate_receive(kind=kind, envelope_from=envelope_from, peer_ip=peer_ip, helo=helo, raw=raw)
            transaction.on_commit(partial(aggregate_report_read_task.delay, mail.pk))
        stored = _store_on_verified_domains(by_domain=by_domain, envelope_from=envelope_from, parsed=parsed, raw=raw)
        for domain_name, addresses in by_domain.items():
            if domain_name in stored:
                continue
            if route_off_verified_domains(domain_name).kind == RouteKind.REPORT:
                for address in addresses:
                    verps.setdefault(NO_VERP, address)
            else:
                refused += addresses
        for verp, address in verps.items():
            report_process(
                parsed=parsed, verp=verp, envelope_from=envelope_from, report_address=address, raw=raw, trust=trust
            )
    return refused

"""Storing a report received at `dmarc-reports@` or `tls-reports@`: the mail always, the report when it reads.

The SMTP session only keeps the mail (aggregate_receive, outcome `received`) and answers 250; a Celery
task reads it afterwards (aggregate_process): parsing, reverse lookups and authentication happen
outside any transaction, then the report is stored atomically, so a flood of reports costs the inbound
server one insert each. The mail is kept whole (ReportMail) whatever it holds; a report is stored per
domain the service knows, once per (domain, reporter, report id), within budgets: at most
MAILSERVICE_REPORT_MAX_RECORDS records, at most MAILSERVICE_REPORT_DAILY_ROWS records a day per
domain, a period within [now - MAILSERVICE_REPORT_MAX_AGE_DAYS, now + 1 day]. Nothing here raises for
bad content: the reason is stored with the mail.
"""

import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import dns.exception
import dns.resolver
import dns.reversename
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Sum
from django.utils import timezone

from domains.dns import dns_resolver
from domains.models import Domain
from mailservice import metrics
from messaging.inbound.aggregate import ReportRefused
from messaging.inbound.aggregate.authentication import report_authenticated
from messaging.inbound.aggregate.dmarc import DmarcAggregate, dmarc_parse
from messaging.inbound.aggregate.tlsrpt import TlsAggregate, tlsrpt_parse
from messaging.inbound.aggregate.unpack import report_attachment, report_document
from messaging.models import (
    AggregateKind,
    DmarcRecord,
    DmarcReport,
    ReportMail,
    ReportMailOutcome,
    TlsReport,
    TlsReportFailure,
)
from messaging.rfc5322.parsing import ParseBudgetExceeded, UnparsableMessage, parse_bytes

logger = logging.getLogger(__name__)

REVERSE_LOOKUPS = 20  # failing sources per report whose PTR is looked up at ingestion
REVERSE_SECONDS = 1.0  # each; the whole report's lookups share REVERSE_LOOKUPS x this at most


def _document(raw: bytes, deadline: float) -> tuple[bytes, str]:
    """The report document and the message's subject."""
    try:
        message = parse_bytes(raw, deadline=deadline)
    except ParseBudgetExceeded:
        raise ReportRefused(f"not parsed within {settings.MAILSERVICE_INBOUND_PARSE_SECONDS:g} s") from None
    except UnparsableMessage as exc:
        raise ReportRefused(str(exc)) from None
    subject = str(message.get("Subject", ""))[:998]
    return report_document(report_attachment(message), limit=settings.MAILSERVICE_REPORT_MAX_BYTES), subject


def _reverse_name(resolver: dns.resolver.Resolver, address: str) -> str:
    try:
        answer = resolver.resolve(dns.reversename.from_address(address), "PTR")
    except (dns.exception.DNSException, ValueError):
        return ""
    return str(answer[0].target).rstrip(".")[:253] if answer else ""


def _reverse_names(addresses: list[str]) -> dict[str, str]:
    """PTR names of up to REVERSE_LOOKUPS addresses through the configured resolver, with a short timeout."""
    resolver = dns_resolver()
    resolver.timeout = resolver.lifetime = min(REVERSE_SECONDS, settings.MAILSERVICE_DNS_TIMEOUT)
    return {address: _reverse_name(resolver, address) for address in addresses[:REVERSE_LOOKUPS]}


class OverBudget(Exception):
    """The domain's reports already hold MAILSERVICE_REPORT_DAILY_ROWS records today."""


def _within_daily_budget(domain: Domain, rows: int) -> None:
    """Raises OverBudget when `rows` more would pass the domain's daily budget. Locks the domain's row
    to the end of the transaction, so concurrent reports about one domain are counted one after another."""
    Domain.objects.select_for_update().filter(pk=domain.pk).first()
    day_start = timezone.now().replace(hour=0, minute=0, second=0, microsecond=0)
    stored = (
        DmarcReport.objects.filter(domain=domain, created_at__gte=day_start).aggregate(rows=Sum("rows"))["rows"] or 0
    )
    budget = settings.MAILSERVICE_REPORT_DAILY_ROWS
    if stored + rows > budget:
        raise OverBudget(
            f"{domain.name}'s reports hold {stored} records today; {rows} more would pass its daily budget of"
            f" {budget} (MAILSERVICE_REPORT_DAILY_ROWS): kept as received mail"
        )


def _store_dmarc(report: DmarcAggregate, read: "AggregateRead", mail: ReportMail, domain: Domain) -> bool:
    """False when this reporter's report was already stored; OverBudget past the daily budget."""
    _within_daily_budget(domain, len(report.rows))
    try:
        with transaction.atomic():
            stored = DmarcReport.objects.create(
                domain=domain,
                org_name=report.org_name,
                report_id=report.report_id,
                begin=report.begin,
                end=report.end,
                policy=report.policy,
                authenticated=read.authenticated,
                rows=len(report.rows),
                mail=mail,
            )
    except IntegrityError:
        return False
    DmarcRecord.objects.bulk_create(
        (
            DmarcRecord(
                report=stored,
                source_ip=row.source_ip,
                count=row.count,
                disposition=row.disposition,
                dkim_aligned=row.dkim_aligned,
                spf_aligned=row.spf_aligned,
                header_from=row.header_from,
                dkim_result=row.dkim_result,
                spf_result=row.spf_result,
                reverse_name=read.reverse_names.get(row.source_ip, ""),
            )
            for row in report.rows
        ),
        batch_size=2000,
    )
    return True


def _store_tls(report: TlsAggregate, read: "AggregateRead", mail: ReportMail, domains: list[Domain]) -> bool:
    """False when this reporter's report was already stored for every domain it covers."""
    new = False
    for domain in domains:
        counts = report.domains[domain.name]
        try:
            with transaction.atomic():
                stored = TlsReport.objects.create(
                    domain=domain,
                    org_name=report.org_name,
                    report_id=report.report_id,
                    begin=report.begin,
                    end=report.end,
                    successful_sessions=counts.successful,
                    failed_sessions=counts.failed,
                    authenticated=read.authenticated,
                    mail=mail,
                )
        except IntegrityError:
            continue
        TlsReportFailure.objects.bulk_create(
            TlsReportFailure(report=stored, result_type=result_type, sessions=sessions)
            for result_type, sessions in counts.failures.items()
        )
        new = True
    return new


@dataclass(frozen=True)
class AggregateRead:
    """What a report mail holds, read before any transaction opens (parsing, DNS): the report and the
    known domains it is about, or the reason it cannot be stored as a report."""

    kind: AggregateKind
    subject: str = ""
    dmarc: DmarcAggregate | None = None
    tls: TlsAggregate | None = None
    domains: tuple[Domain, ...] = ()
    reverse_names: dict[str, str] = field(default_factory=dict)
    authenticated: bool = False
    reason: str = ""


def _period_checked(begin: datetime, end: datetime) -> None:
    """A report's period must lie within [now - MAILSERVICE_REPORT_MAX_AGE_DAYS, now + 1 day]: one dated
    in 9999 would otherwise stay on every summary, one from years ago counts nothing current."""
    now = timezone.now()
    earliest = now - timedelta(days=settings.MAILSERVICE_REPORT_MAX_AGE_DAYS)
    if begin < earliest or end > now + timedelta(days=1):
        raise ReportRefused(
            f"report's period {begin:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC is outside"
            f" [now - {settings.MAILSERVICE_REPORT_MAX_AGE_DAYS} days (MAILSERVICE_REPORT_MAX_AGE_DAYS), now + 1 day]"
        )


@dataclass(frozen=True)
class _Envelope:
    """What the SMTP session recorded of the mail: authentication's input."""

    raw: bytes
    envelope_from: str
    peer_ip: str
    helo: str


def _dmarc_read(document: bytes, subject: str, envelope: _Envelope, deadline: float) -> AggregateRead:
    report = dmarc_parse(document, max_records=settings.MAILSERVICE_REPORT_MAX_RECORDS, deadline=deadline)
    _period_checked(report.begin, report.end)
    domain = Domain.objects.filter(name=report.domain).first()
    if domain is None:
        raise ReportRefused(f"DMARC report about {report.domain}, a domain this service does not know")
    failing = dict.fromkeys(row.source_ip for row in report.rows if not (row.dkim_aligned or row.spf_aligned))
    names = _reverse_names([address for address in failing if ipaddress.ip_address(address).is_global])
    authenticated = report_authenticated(
        raw=envelope.raw,
        reporter_domain=report.email_domain,
        peer_ip=envelope.peer_ip,
        envelope_from=envelope.envelope_from,
        helo=envelope.helo,
    )
    return AggregateRead(
        AggregateKind.DMARC,
        subject,
        dmarc=report,
        domains=(domain,),
        reverse_names=names,
        authenticated=authenticated,
    )


def _tls_read(document: bytes, subject: str, envelope: _Envelope, deadline: float) -> AggregateRead:
    report = tlsrpt_parse(document)
    _period_checked(report.begin, report.end)
    domains = tuple(Domain.objects.filter(name__in=report.domains).order_by("name"))
    if not domains:
        raise ReportRefused(f"TLS report about {', '.join(sorted(report.domains))[:200]}: no domain this service knows")
    authenticated = report_authenticated(
        raw=envelope.raw,
        reporter_domain=report.contact_domain,
        peer_ip=envelope.peer_ip,
        envelope_from=envelope.envelope_from,
        helo=envelope.helo,
    )
    return AggregateRead(AggregateKind.TLS, subject, tls=report, domains=domains, authenticated=authenticated)


_READ: dict[str, Callable[[bytes, str, _Envelope, float], AggregateRead]] = {
    AggregateKind.DMARC: _dmarc_read,
    AggregateKind.TLS: _tls_read,
}


def aggregate_read(*, mail: ReportMail) -> AggregateRead:
    """Read the report a mail to `dmarc-reports@` or `tls-reports@` carries; never raises for bad
    content (the reason is in the result). Done outside any transaction: it parses, looks up the
    failing sources' reverse names and authenticates the mail."""
    deadline = time.monotonic() + settings.MAILSERVICE_INBOUND_PARSE_SECONDS
    raw = bytes(mail.raw)
    envelope = _Envelope(raw, mail.envelope_from, mail.peer_ip or "", mail.helo)
    subject = ""
    try:
        document, subject = _document(raw, deadline)
        return _READ[mail.kind](document, subject, envelope, deadline)
    except ReportRefused as exc:
        return AggregateRead(AggregateKind(mail.kind), subject, reason=str(exc))


def aggregate_receive(*, kind: AggregateKind, envelope_from: str, peer_ip: str, helo: str, raw: bytes) -> ReportMail:
    """Keep a report mail as received, for aggregate_process to read off the SMTP session."""
    try:
        peer = str(ipaddress.ip_address(peer_ip)) if peer_ip else None
    except ValueError:
        peer = None
    return ReportMail.objects.create(
        kind=kind,
        outcome=ReportMailOutcome.RECEIVED,
        envelope_from=envelope_from[:320],
        peer_ip=peer,
        helo=helo[:255],
        raw=raw,
    )


def _store(read: AggregateRead, mail: ReportMail) -> None:
    """The report, if any, and what became of the mail; in the caller's transaction."""
    mail.outcome = ReportMailOutcome.REFUSED if read.reason else ReportMailOutcome.STORED
    mail.reason, mail.subject = read.reason, read.subject
    mail.domain = read.domains[0] if read.domains else None
    new = True
    try:
        with transaction.atomic():
            if read.dmarc is not None:
                new = _store_dmarc(read.dmarc, read, mail, read.domains[0])
            elif read.tls is not None:
                new = _store_tls(read.tls, read, mail, list(read.domains))
    except OverBudget as exc:
        mail.outcome, mail.reason = ReportMailOutcome.REFUSED, str(exc)
    if not new:
        mail.outcome = ReportMailOutcome.DUPLICATE
    mail.save(update_fields=["outcome", "reason", "subject", "domain", "updated_at"])


def aggregate_process(*, mail_id: int) -> ReportMail | None:
    """Read a received report mail and store its report; None when it was already read (a task
    delivered twice, or the sweep's copy). The claim is the row lock on a mail still `received`."""
    mail = ReportMail.objects.filter(pk=mail_id, outcome=ReportMailOutcome.RECEIVED).first()
    if mail is None:
        return None
    read = aggregate_read(mail=mail)
    with transaction.atomic():
        claimed = (
            ReportMail.objects.select_for_update(skip_locked=True)
            .filter(pk=mail_id, outcome=ReportMailOutcome.RECEIVED)
            .first()
        )
        if claimed is None:
            return None
        _store(read, claimed)
    metrics.aggregate_report(kind=read.kind, outcome=claimed.outcome)
    if claimed.outcome == ReportMailOutcome.REFUSED:
        logger.warning("inbound: %s report from <%s> kept unread: %s", read.kind, claimed.envelope_from, claimed.reason)
    return claimed


def aggregate_unread(*, older_than: float) -> list[int]:
    """Report mails still `received` after `older_than` seconds: their task was lost (a broker or
    worker restart); the sweep enqueues them again."""
    cutoff = timezone.now() - timedelta(seconds=older_than)
    return list(
        ReportMail.objects.filter(outcome=ReportMailOutcome.RECEIVED, created_at__lt=cutoff)
        .order_by("created_at")
        .values_list("pk", flat=True)[:1000]
    )

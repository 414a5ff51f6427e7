"""Storing a report received at `dmarc-reports@` or `tls-reports@`: the mail always, the report when it reads.

The mail is kept whole (ReportMail) whatever it holds; a report is stored per domain the service
knows, once per (domain, reporter, report id). Nothing here raises for bad content: the reason is
stored with the mail, and the server answers 250 so the reporter does not retry it for ever.
"""

import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import dns.exception
import dns.resolver
import dns.reversename
from django.conf import settings
from django.db import IntegrityError, transaction

from domains.dns import dns_resolver
from domains.models import Domain
from mailservice import metrics
from messaging.inbound.aggregate import ReportRefused
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


def _store_dmarc(report: DmarcAggregate, mail: ReportMail, domain: Domain, names: dict[str, str]) -> bool:
    """False when this reporter's report was already stored."""
    try:
        with transaction.atomic():
            stored = DmarcReport.objects.create(
                domain=domain,
                org_name=report.org_name,
                report_id=report.report_id,
                begin=report.begin,
                end=report.end,
                policy=report.policy,
                mail=mail,
            )
    except IntegrityError:
        return False
    DmarcRecord.objects.bulk_create(
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
            reverse_name=names.get(row.source_ip, ""),
        )
        for row in report.rows
    )
    return True


def _store_tls(report: TlsAggregate, mail: ReportMail, domains: list[Domain]) -> bool:
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
    reason: str = ""


def _dmarc_read(document: bytes, subject: str) -> AggregateRead:
    report = dmarc_parse(document, max_records=settings.MAILSERVICE_REPORT_MAX_RECORDS)
    domain = Domain.objects.filter(name=report.domain).first()
    if domain is None:
        raise ReportRefused(f"DMARC report about {report.domain}, a domain this service does not know")
    failing = dict.fromkeys(row.source_ip for row in report.rows if not (row.dkim_aligned or row.spf_aligned))
    names = _reverse_names([address for address in failing if ipaddress.ip_address(address).is_global])
    return AggregateRead(AggregateKind.DMARC, subject, dmarc=report, domains=(domain,), reverse_names=names)


def _tls_read(document: bytes, subject: str) -> AggregateRead:
    report = tlsrpt_parse(document)
    domains = tuple(Domain.objects.filter(name__in=report.domains).order_by("name"))
    if not domains:
        raise ReportRefused(f"TLS report about {', '.join(sorted(report.domains))[:200]}: no domain this service knows")
    return AggregateRead(AggregateKind.TLS, subject, tls=report, domains=domains)


_READ: dict[str, Callable[[bytes, str], AggregateRead]] = {
    AggregateKind.DMARC: _dmarc_read,
    AggregateKind.TLS: _tls_read,
}


def aggregate_read(*, kind: AggregateKind, raw: bytes) -> AggregateRead:
    """Read the report a mail to `dmarc-reports@` or `tls-reports@` carries; never raises for bad
    content (the reason is in the result). Done outside any transaction: it parses and looks up
    the failing sources' reverse names."""
    deadline = time.monotonic() + settings.MAILSERVICE_INBOUND_PARSE_SECONDS
    subject = ""
    try:
        document, subject = _document(raw, deadline)
        return _READ[kind](document, subject)
    except ReportRefused as exc:
        return AggregateRead(kind, subject, reason=str(exc))


def aggregate_store(*, read: AggregateRead, envelope_from: str, raw: bytes) -> ReportMail:
    """Keep the mail, and the report it carries once per reporter's report id; the mail is `refused`
    with the reason when there is no report to store. Atomic."""
    mail = ReportMail(
        kind=read.kind,
        outcome=ReportMailOutcome.REFUSED if read.reason else ReportMailOutcome.STORED,
        reason=read.reason,
        domain=read.domains[0] if read.domains else None,
        envelope_from=envelope_from[:320],
        subject=read.subject,
        raw=raw,
    )
    with transaction.atomic():
        mail.save(force_insert=True)
        new = True
        if read.dmarc is not None:
            new = _store_dmarc(read.dmarc, mail, read.domains[0], read.reverse_names)
        elif read.tls is not None:
            new = _store_tls(read.tls, mail, list(read.domains))
        if not new:
            mail.outcome = ReportMailOutcome.DUPLICATE
            mail.save(update_fields=["outcome", "updated_at"])
    metrics.aggregate_report(kind=read.kind, outcome=mail.outcome)
    if read.reason:
        logger.warning("inbound: %s report from <%s> kept unread: %s", read.kind, envelope_from, read.reason)
    return mail

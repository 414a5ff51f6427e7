"""Sending the day's TLS reports (RFC 8460 §3, §5): for each policy domain with sessions counted that
day, the `rua` URIs of its `_smtp._tls` TXT record get the gzipped JSON report.

`mailto:` goes through the service's own delivery, as a message from MAILSERVICE_TLSRPT_FROM (an address
on a verified domain, so dispatch DKIM-signs it as RFC 8460 §5.3 requires). `https:` is a POST to the
host resolved through the configured resolver, refused on a private address unless
MAILSERVICE_MX_ALLOW_PRIVATE, verified against the system store and MAILSERVICE_TLS_CA_FILE, within
REPORT_POST_TIMEOUT. Each (day, domain, rua) is sent once (`TlsReportSubmission`).

Reports go only to policy domains the service connected to that day, and at most
MAILSERVICE_TLSRPT_MAX_PER_RUA a day to one rua mailbox or host across all of them: anyone whose
domains the service delivers to can publish a rua at a third party, and would otherwise turn each
delivery into a DKIM-signed report mail from the operator's reporter to an address of their choosing.
"""

import gzip
import ipaddress
import json
import logging
import ssl
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, timedelta
from email.message import EmailMessage
from email.policy import SMTP
from urllib.parse import unquote, urlsplit

import dns.exception
import dns.resolver
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from domains.dns import dns_resolver
from domains.models import Domain
from mailservice import metrics
from mailservice.addresses import may_connect
from mailservice.errors import ApiError, ValidationFailed
from mailservice.http_deadline import REQUEST_ERRORS, post_status
from mailservice.ids import public_id
from mailservice.mailbox import InvalidAddress, comparison_key, parse_address
from messaging.models import Direction, Message, Status, TlsReportStatus, TlsReportSubmission
from messaging.outbound.direct.routing import Undeliverable, a_label
from messaging.services import message_store, send_permitted
from messaging.tls_reports.counts import policy_domains_counted, report_window, tls_report

logger = logging.getLogger(__name__)

MAX_RUAS = 5  # per policy domain: a record listing more is read up to this many
MAX_RECORD_CHARS = 2048  # of a TLSRPT record: the rest is not read
REPORT_POST_TIMEOUT = 30.0  # seconds for a whole https: submission, connect to status line
_DETAIL_CHARS = 300
MEDIA_TYPE = "application/tlsrpt+gzip"


@dataclass(frozen=True)
class Reporter:
    """Who submits the reports: MAILSERVICE_TLSRPT_FROM, on its verified sending domain."""

    address: str  # as sent in From
    domain: Domain

    @property
    def submitter(self) -> str:
        return self.domain.name


@dataclass(frozen=True)
class Sent:
    policy_domain: str
    rua: str  # empty: the domain publishes no (usable) TLSRPT record
    outcome: str

    def __str__(self) -> str:
        return (
            f"{self.policy_domain} {self.rua}: {self.outcome}" if self.rua else f"{self.policy_domain}: {self.outcome}"
        )


def reporter() -> Reporter | None:
    """The configured sender, or None when MAILSERVICE_TLSRPT_FROM is unset; ValidationFailed when it
    cannot send (not an address, no such domain, the domain unverified or paused)."""
    configured = settings.MAILSERVICE_TLSRPT_FROM
    if not configured:
        return None
    try:
        address = parse_address(configured)
    except InvalidAddress as exc:
        raise ValidationFailed(f"MAILSERVICE_TLSRPT_FROM: {exc}") from None
    domain = Domain.objects.filter(name=address.domain).first()
    if domain is None:
        raise ValidationFailed(f"MAILSERVICE_TLSRPT_FROM: {address.domain} is not a sending domain of this service")
    try:
        send_permitted(domain=domain, from_address=configured)
    except ApiError as exc:
        raise ValidationFailed(f"MAILSERVICE_TLSRPT_FROM: {exc.message}") from None
    return Reporter(address=configured, domain=domain)


def previous_utc_day() -> date:
    """The day the daily run reports on."""
    return timezone.now().astimezone(UTC).date() - timedelta(days=1)


def tls_reports_send(*, day: date) -> list[Sent] | None:
    """Send `day`'s report of every policy domain to each of its `rua`s not already sent to; None (nothing
    sent) when MAILSERVICE_TLSRPT_FROM is unset."""
    sender = reporter()
    if sender is None:
        return None
    resolver = dns_resolver()
    budget = _RuaBudget(day)
    results: list[Sent] = []
    for policy_domain in policy_domains_counted(day=day):
        ruas = report_uris(resolver, policy_domain)
        if not ruas:
            results.append(Sent(policy_domain, "", "no TLSRPT record (_smtp._tls), no report"))
            continue
        report_id = public_id("tlsrpt")
        document = tls_report(
            day=day,
            policy_domain=policy_domain,
            organization=sender.submitter,
            contact=sender.address,
            report_id=report_id,
        )
        body = gzip.compress(json.dumps(document).encode(), mtime=0)
        for rua in ruas:
            if budget.spent(policy_domain, rua):
                metrics.tls_report_skipped()
                outcome = (
                    f"not sent: {rua_target(rua)} has had {settings.MAILSERVICE_TLSRPT_MAX_PER_RUA} reports for "
                    f"{day} (MAILSERVICE_TLSRPT_MAX_PER_RUA)"
                )
                results.append(Sent(policy_domain, rua, outcome))
                continue
            results.append(_submit(sender, day, policy_domain, rua, report_id, body))
            budget.note(policy_domain, rua)
    return results


def rua_target(rua: str) -> str:
    """Who receives what is sent to a rua: its mailbox (mailto:) or its host (https:)."""
    parts = urlsplit(rua)
    if parts.scheme.lower() == "mailto":
        return "mailto:" + comparison_key(unquote(parts.path))
    return "https://" + (parts.hostname or "").rstrip(".")


class _RuaBudget:
    """The reports a day may still send to each rua target: MAILSERVICE_TLSRPT_MAX_PER_RUA, less the
    submissions already recorded for it that day (any status: a failed post reached the host too).
    A policy domain's own rua already submitted is not new: its run goes on as before ("already sent")."""

    def __init__(self, day: date) -> None:
        self.day = day
        recorded = TlsReportSubmission.objects.filter(day=day).values_list("policy_domain", "rua")
        self.submitted = set(recorded)
        self.used = Counter(rua_target(rua) for _, rua in self.submitted)

    def spent(self, policy_domain: str, rua: str) -> bool:
        if (policy_domain, rua[:500]) in self.submitted:
            return False
        return self.used[rua_target(rua)] >= settings.MAILSERVICE_TLSRPT_MAX_PER_RUA

    def note(self, policy_domain: str, rua: str) -> None:
        """Count the rua's submission, when one was recorded (a rua refused before sending uses none)."""
        key = (policy_domain, rua[:500])
        if key in self.submitted:
            return
        if TlsReportSubmission.objects.filter(day=self.day, policy_domain=policy_domain, rua=rua[:500]).exists():
            self.submitted.add(key)
            self.used[rua_target(rua)] += 1


def report_uris(resolver: dns.resolver.Resolver, policy_domain: str) -> list[str]:
    """The mailto: and https: `rua` URIs of the domain's one TLSRPT record (RFC 8460 §3); none
    when it has none, several, or the lookup fails."""
    name = f"_smtp._tls.{policy_domain}"
    try:
        answer = resolver.resolve(name, "TXT", search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return []
    except dns.exception.DNSException as exc:
        logger.warning("tls-rpt: the TXT lookup of %s failed, no report: %s", name, exc)
        return []
    texts = [b"".join(rdata.strings)[:MAX_RECORD_CHARS].decode("ascii", "replace") for rdata in answer]
    records = [text for text in texts if text.startswith("v=TLSRPTv1;")]
    if len(records) != 1:  # RFC 8460 §3: anything but exactly one means no reporting
        return []
    fields = (part.strip().partition("=") for part in records[0].split(";"))
    rua = next((value for key, _, value in fields if key.strip() == "rua"), "")
    uris = [uri.strip() for uri in rua.split(",")]
    return [uri for uri in uris if uri.lower().startswith(("mailto:", "https:"))][:MAX_RUAS]


def report_filename(*, submitter: str, policy_domain: str, day: date, report_id: str) -> str:
    """RFC 8460 §5.3: sender!policy-domain!begin!end!unique-id.json.gz, the times in seconds since the epoch."""
    start, end = report_window(day)
    return f"{submitter}!{policy_domain}!{int(start.timestamp())}!{int(end.timestamp())}!{report_id}.json.gz"


def _submit(sender: Reporter, day: date, policy_domain: str, rua: str, report_id: str, body: bytes) -> Sent:
    try:
        if rua.lower().startswith("mailto:"):
            outcome = _mail(sender, day, policy_domain, rua, report_id, body)
        else:
            outcome = _post(day, policy_domain, rua, report_id, body)
    except (ApiError, ReportRefused) as exc:
        outcome = f"not sent: {exc}"
    logger.info("tls-rpt: %s %s %s: %s", day, policy_domain, rua, outcome)
    return Sent(policy_domain, rua, outcome)


class ReportRefused(Exception):
    """The rua cannot be sent to; the message says why."""


def _mail(sender: Reporter, day: date, policy_domain: str, rua: str, report_id: str, body: bytes) -> str:
    """Store the report as an outbound message; it and its submission record commit together."""
    try:
        recipient = parse_address(unquote(urlsplit(rua).path)).wire
    except InvalidAddress as exc:
        raise ReportRefused(f"not a mail address: {exc}") from None
    filename = report_filename(submitter=sender.submitter, policy_domain=policy_domain, day=day, report_id=report_id)
    mime = report_mime(
        sender=sender, recipient=recipient, policy_domain=policy_domain, report_id=report_id, filename=filename
    )
    subject = str(mime["Subject"])
    message = Message(
        domain=sender.domain,
        direction=Direction.SENT,
        status=Status.ACCEPTED,
        from_address=sender.address,
        to=[recipient],
        subject=subject,
        envelope_from=sender.address,
        envelope_recipients=[recipient],
        raw=_with_attachment(mime, body, filename),
        next_attempt_at=timezone.now(),
    )
    message.message_id_header = f"<{message.public_id}@{sender.submitter}>"
    with transaction.atomic():
        if not _claimed(day, policy_domain, rua, report_id, TlsReportStatus.SENT, message.public_id):
            return "already sent"
        message_store(domain=sender.domain, message=message)
    return f"queued as {message.public_id}"


def report_mime(*, sender: Reporter, recipient: str, policy_domain: str, report_id: str, filename: str) -> EmailMessage:
    """The report message's header and human-readable part (RFC 8460 §5.3); the email package refuses a
    line break in any header value, so nothing read from DNS can add a header."""
    mime = EmailMessage(policy=SMTP)
    mime["From"] = sender.address
    mime["To"] = recipient
    mime["Subject"] = f"Report Domain: {policy_domain} Submitter: {sender.submitter} Report-ID: <{report_id}>"
    mime["TLS-Report-Domain"] = policy_domain
    mime["TLS-Report-Submitter"] = sender.submitter
    mime.set_content(
        f"This is an aggregate TLS report (RFC 8460) from {sender.submitter} about mail to {policy_domain}.\n"
        f"The report is attached as {filename}.\n"
    )
    return mime


def _with_attachment(mime: EmailMessage, body: bytes, filename: str) -> bytes:
    """multipart/report; report-type=tlsrpt: the text, then the gzipped report."""
    mime.add_attachment(body, maintype="application", subtype="tlsrpt+gzip", filename=filename)
    mime.set_type("multipart/report")
    mime.set_param("report-type", "tlsrpt")
    return mime.as_bytes()


def _claimed(day: date, policy_domain: str, rua: str, report_id: str, status: str, detail: str) -> bool:
    """Record the submission; False if this rua already has the day's report (or a failed one is not
    ours to retry: another run took it)."""
    key = {"day": day, "policy_domain": policy_domain, "rua": rua[:500]}
    retry = TlsReportSubmission.objects.filter(**key, status=TlsReportStatus.FAILED)
    if retry.update(status=status, report_id=report_id, detail=detail, updated_at=timezone.now()) == 1:
        return True
    try:
        with transaction.atomic():
            TlsReportSubmission.objects.create(**key, report_id=report_id, status=status, detail=detail)
    except IntegrityError:
        return False
    return True


def _post(day: date, policy_domain: str, rua: str, report_id: str, body: bytes) -> str:
    """POST the report; the submission is claimed first and marked sent or failed after."""
    url, host, address = _https_target(rua)
    if not _claimed(day, policy_domain, rua, report_id, TlsReportStatus.SENDING, ""):
        return "already sent"
    netloc = f"[{address}]" if address.version == 6 else str(address)
    parts = urlsplit(url)
    if parts.port:
        netloc += f":{parts.port}"
    try:
        status = post_status(
            url=parts._replace(netloc=netloc).geturl(),
            headers={"Host": host, "Content-Type": MEDIA_TYPE, "Content-Length": str(len(body))},
            body=body,
            sni_hostname=parts.hostname or "",
            ssl_context=_verifying_context(),
            timeout=REPORT_POST_TIMEOUT,
        )
    except REQUEST_ERRORS as exc:
        return _mark(day, policy_domain, rua, TlsReportStatus.FAILED, f"not sent: {_brief(exc)}")
    if 200 <= status < 300:
        return _mark(day, policy_domain, rua, TlsReportStatus.SENT, f"posted, HTTP {status}")
    return _mark(day, policy_domain, rua, TlsReportStatus.FAILED, f"not accepted: HTTP {status}")


def _mark(day: date, policy_domain: str, rua: str, status: str, detail: str) -> str:
    TlsReportSubmission.objects.filter(day=day, policy_domain=policy_domain, rua=rua[:500]).update(
        status=status, detail=detail, updated_at=timezone.now()
    )
    return detail


def _https_target(rua: str) -> tuple[str, str, ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """(URL, Host header, the address to connect to) of an https: rua; ReportRefused when it may not be used."""
    try:
        parts = urlsplit(rua)
        hostname, port = parts.hostname or "", parts.port
    except ValueError as exc:
        raise ReportRefused(f"not a URL: {exc}") from None
    if parts.scheme.lower() != "https" or not hostname or parts.username is not None:
        raise ReportRefused("only https: URLs with a host (and no user name) are posted to")
    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        pass
    else:
        raise ReportRefused(f"{hostname} is an IP address, not a host name")
    try:
        host = a_label(hostname)
    except Undeliverable:
        raise ReportRefused(f"{hostname} is not a host name") from None
    addresses = _resolved(host)
    allowed = [a for a in addresses if may_connect(a, allow_private=settings.MAILSERVICE_MX_ALLOW_PRIVATE)]
    if not allowed:
        shown = ", ".join(str(a) for a in addresses[:3])
        raise ReportRefused(
            f"{host} resolves only to private or loopback addresses ({shown}); MAILSERVICE_MX_ALLOW_PRIVATE is off"
        )
    return rua, host + (f":{port}" if port else ""), allowed[0]


def _resolved(host: str) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    resolver = dns_resolver()
    found: list[ipaddress.IPv4Address | ipaddress.IPv6Address] = []
    for rdtype in ("A", "AAAA"):
        try:
            found += [ipaddress.ip_address(r.address) for r in resolver.resolve(host, rdtype, search=False)]
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            continue
        except dns.exception.DNSException as exc:
            raise ReportRefused(f"the {rdtype} lookup of {host} failed: {_brief(exc)}") from None
    if not found:
        raise ReportRefused(f"{host} has no A or AAAA record")
    return found


def _verifying_context() -> ssl.SSLContext:
    """The system's trust store, plus MAILSERVICE_TLS_CA_FILE's anchors."""
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if settings.MAILSERVICE_TLS_CA_FILE:
        context.load_verify_locations(cafile=settings.MAILSERVICE_TLS_CA_FILE)
    return context


def _brief(exc: BaseException) -> str:
    return (" ".join(str(exc).split()) or type(exc).__name__)[:_DETAIL_CHARS]

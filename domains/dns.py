"""The DNS records a sending domain must publish, and the check that looks them up.

Records are computed from the domain and settings; the check asks one resolver (settings
`MAILSERVICE_DNS_RESOLVER`, `MAILSERVICE_DNS_TIMEOUT`) and compares what it finds with
what is expected. A matching verification record verifies the domain.
"""

import enum
from dataclasses import dataclass

import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver
from django.conf import settings

from domains.models import Domain
from domains.services import domain_mark_verified
from mailservice.errors import ValidationFailed

VERIFICATION_PREFIX = "mailservice-verification="
DNS_CHECK_ACTOR = "DNS check"


class Purpose(enum.StrEnum):
    VERIFICATION = "Verification"
    SPF = "SPF"
    DKIM = "DKIM"
    RETURN_PATH = "Return path (bounces)"


@dataclass(frozen=True)
class DnsRecord:
    purpose: Purpose
    name: str
    type: str  # "TXT" or "MX"
    value: str  # TXT: the text; MX: "<priority> <host>."


class DnsOutcome(enum.StrEnum):
    FOUND = "found"
    MISSING = "missing"
    WRONG = "wrong value"
    UNANSWERED = "no answer (timeout)"


@dataclass(frozen=True)
class RecordCheck:
    record: DnsRecord
    outcome: DnsOutcome
    seen: tuple[str, ...]  # what the resolver returned for that name and type


@dataclass(frozen=True)
class DnsCheck:
    checks: list[RecordCheck]
    verified_now: bool  # this check is what verified the domain


MX_PRIORITY = 10


def return_path_domain(*, domain: Domain) -> str:
    """Where bounces are addressed: the VERP domain when one is configured, else the sender's own domain."""
    return settings.MAILSERVICE_RETURN_PATH_DOMAIN or domain.name


def dns_records(*, domain: Domain) -> list[DnsRecord]:
    """What to publish, in the order an operator works through it. Unconfigured records are left out."""
    records = [
        DnsRecord(
            Purpose.VERIFICATION, f"_mailservice.{domain.name}", "TXT", VERIFICATION_PREFIX + domain.verification_token
        )
    ]
    if settings.MAILSERVICE_SPF_INCLUDE:
        records.append(
            DnsRecord(Purpose.SPF, domain.name, "TXT", f"v=spf1 include:{settings.MAILSERVICE_SPF_INCLUDE} ~all")
        )
    if domain.dkim_public_key:
        records.append(
            DnsRecord(
                Purpose.DKIM,
                f"{domain.dkim_selector}._domainkey.{domain.name}",
                "TXT",
                f"v=DKIM1; k=rsa; p={domain.dkim_public_key}",
            )
        )
    if settings.MAILSERVICE_INBOUND_HOST:
        host = settings.MAILSERVICE_INBOUND_HOST.rstrip(".")
        records.append(
            DnsRecord(Purpose.RETURN_PATH, return_path_domain(domain=domain), "MX", f"{MX_PRIORITY} {host}.")
        )
    return records


def unconfigured_settings() -> list[str]:
    """Settings whose absence hides a record from `dns_records`, for the console to point out."""
    return [name for name in ("MAILSERVICE_SPF_INCLUDE", "MAILSERVICE_INBOUND_HOST") if not getattr(settings, name)]


def _resolver() -> dns.resolver.Resolver:
    configured = settings.MAILSERVICE_DNS_RESOLVER
    if not configured:
        resolver = dns.resolver.Resolver()
    else:
        host, _, port = configured.rpartition(":") if configured.count(":") == 1 else (configured, "", "53")
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise ValidationFailed(f"MAILSERVICE_DNS_RESOLVER must be host or host:port, got {configured!r}")
        resolver = dns.resolver.Resolver(configure=False)
        resolver.nameservers = [host]
        resolver.port = int(port)
    # One attempt bounded by the timeout: the console waits on this.
    resolver.timeout = resolver.lifetime = settings.MAILSERVICE_DNS_TIMEOUT
    return resolver


def _lookup(resolver: dns.resolver.Resolver, record: DnsRecord) -> tuple[str, ...] | None:
    """The values published at the record's name and type; None when the resolver did not answer."""
    try:
        answer = resolver.resolve(record.name, record.type, search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return ()
    except (dns.exception.Timeout, dns.resolver.NoNameservers):
        return None
    if record.type == "TXT":
        return tuple(b"".join(rdata.strings).decode("utf-8", "replace") for rdata in answer)
    return tuple(f"{rdata.preference} {rdata.exchange.to_text()}" for rdata in answer)


def _tags(txt: str) -> dict[str, str]:
    pairs = (part.split("=", 1) for part in txt.split(";") if "=" in part)
    return {key.strip().lower(): "".join(value.split()) for key, value in pairs}


def _matches(record: DnsRecord, value: str) -> bool:
    if record.purpose is Purpose.SPF:
        return f"include:{settings.MAILSERVICE_SPF_INCLUDE}".lower() in value.lower().split()
    if record.purpose is Purpose.DKIM:
        return _tags(value).get("p") == _tags(record.value)["p"]
    if record.purpose is Purpose.RETURN_PATH:
        return dns.name.from_text(value.split()[-1]) == dns.name.from_text(record.value.split()[-1])
    return value.strip() == record.value


def _relevant(record: DnsRecord, value: str) -> bool:
    """Whether a value at the record's name is an attempt at this record (other TXT records share names)."""
    marker = {Purpose.VERIFICATION: VERIFICATION_PREFIX, Purpose.SPF: "v=spf1", Purpose.DKIM: ""}.get(
        record.purpose, ""
    )
    return value.lower().startswith(marker)


def _outcome(record: DnsRecord, seen: tuple[str, ...] | None) -> DnsOutcome:
    if seen is None:
        return DnsOutcome.UNANSWERED
    if any(_matches(record, value) for value in seen):
        return DnsOutcome.FOUND
    return DnsOutcome.WRONG if any(_relevant(record, value) for value in seen) else DnsOutcome.MISSING


def domain_check_dns(*, domain: Domain) -> DnsCheck:
    """Look every record up; verify the domain when its verification record is published."""
    resolver = _resolver()
    checks = []
    for record in dns_records(domain=domain):
        seen = _lookup(resolver, record)
        checks.append(RecordCheck(record=record, outcome=_outcome(record, seen), seen=seen or ()))
    verification_found = checks[0].outcome is DnsOutcome.FOUND
    verify = verification_found and not domain.verified
    if verify:
        domain_mark_verified(domain=domain, actor=DNS_CHECK_ACTOR)
    return DnsCheck(checks=checks, verified_now=verify)

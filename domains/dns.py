"""The DNS records a sending domain must publish, and the check that looks them up.

Records are computed from the domain and settings; the check asks one resolver (settings
`MAILSERVICE_DNS_RESOLVER`, `MAILSERVICE_DNS_TIMEOUT`) and compares what it finds with
what is expected. A matching verification record verifies the domain; a matching record of a
pending DKIM key (after `rotate_dkim`) makes that key the one that signs.
"""

import enum
from dataclasses import dataclass

import dns.exception
import dns.name
import dns.rdatatype
import dns.resolver
from django.conf import settings

from domains.models import DkimKey, DkimKeyState, Domain
from domains.selectors import dkim_keys_published
from domains.services import dkim_activate, domain_mark_verified
from mailservice.errors import ValidationFailed

VERIFICATION_PREFIX = "mailservice-verification="
DNS_CHECK_ACTOR = "DNS check"


class Purpose(enum.StrEnum):
    VERIFICATION = "Verification"
    SPF = "SPF"
    DKIM = "DKIM"
    DKIM_PENDING = "DKIM, new key (pending)"
    DKIM_RETIRING = "DKIM, old key (retiring)"
    RETURN_PATH = "Return path (bounces)"


@dataclass(frozen=True)
class DnsRecord:
    purpose: Purpose
    name: str
    type: str  # "TXT" or "MX"
    value: str  # TXT: the text; MX: "<priority> <host>."
    note: str = ""  # what the operator should do with it, when it is not simply "publish"


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
    dkim_switched_to: str = ""  # the selector this check made the signing one (its record was found)


MX_PRIORITY = 10


def return_path_domain(*, domain: Domain) -> str:
    """Where bounces are addressed: the VERP domain when one is configured, else the sender's own domain."""
    return settings.MAILSERVICE_RETURN_PATH_DOMAIN or domain.name


_DKIM_PURPOSES = {
    DkimKeyState.ACTIVE: Purpose.DKIM,
    DkimKeyState.PENDING: Purpose.DKIM_PENDING,
    DkimKeyState.RETIRING: Purpose.DKIM_RETIRING,
}


def dkim_record(*, domain: Domain, key: DkimKey) -> DnsRecord:
    if key.state == DkimKeyState.PENDING:
        note = "publish this, then Check DNS: signing switches to this key once its record is found"
    elif key.state == DkimKeyState.RETIRING:
        note = f"retiring: keep published until {key.retire_after:%Y-%m-%d %H:%M} UTC"
    else:
        note = ""
    return DnsRecord(
        _DKIM_PURPOSES[DkimKeyState(key.state)],
        f"{key.selector}._domainkey.{domain.name}",
        "TXT",
        f"v=DKIM1; k=rsa; p={key.public_key}",
        note,
    )


def dns_records(*, domain: Domain) -> list[DnsRecord]:
    """What to publish, in the order an operator works through it. Unconfigured records are left out."""
    return _records(domain=domain, keys=dkim_keys_published(domain=domain))


def _records(*, domain: Domain, keys: list[DkimKey]) -> list[DnsRecord]:
    # DKIM: the signing key, then the pending one beside it, then those retiring.
    by_state = sorted(keys, key=lambda key: list(_DKIM_PURPOSES).index(DkimKeyState(key.state)))
    records = [
        DnsRecord(
            Purpose.VERIFICATION, f"_mailservice.{domain.name}", "TXT", VERIFICATION_PREFIX + domain.verification_token
        )
    ]
    if settings.MAILSERVICE_SPF_INCLUDE:
        records.append(
            DnsRecord(Purpose.SPF, domain.name, "TXT", f"v=spf1 include:{settings.MAILSERVICE_SPF_INCLUDE} ~all")
        )
    records += [dkim_record(domain=domain, key=key) for key in by_state]
    if settings.MAILSERVICE_INBOUND_HOST:
        host = settings.MAILSERVICE_INBOUND_HOST.rstrip(".")
        records.append(
            DnsRecord(Purpose.RETURN_PATH, return_path_domain(domain=domain), "MX", f"{MX_PRIORITY} {host}.")
        )
    return records


def unconfigured_settings() -> list[str]:
    """Settings whose absence hides a record from `dns_records`, for the console to point out."""
    return [name for name in ("MAILSERVICE_SPF_INCLUDE", "MAILSERVICE_INBOUND_HOST") if not getattr(settings, name)]


def dns_resolver() -> dns.resolver.Resolver:
    """The resolver every lookup of the service asks (Check DNS, direct delivery's MX routing)."""
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
    # One attempt bounded by the timeout: the console and the delivery worker wait on this.
    resolver.timeout = resolver.lifetime = settings.MAILSERVICE_DNS_TIMEOUT
    return resolver


def dkim_key_txt(name: bytes, timeout: float = 5.0) -> bytes | None:
    """dkimpy's `dnsfunc`: the TXT record at `name` through the service's resolver, within
    MAILSERVICE_DNS_TIMEOUT; None when there is none or the lookup fails (the signature then does not verify)."""
    try:
        answer = dns_resolver().resolve(
            name.decode("ascii"), "TXT", search=False, lifetime=min(timeout, settings.MAILSERVICE_DNS_TIMEOUT)
        )
    except (dns.exception.DNSException, UnicodeDecodeError):
        return None
    record = next(iter(answer), None)
    return b"".join(record.strings) if record is not None else None


def lookup(resolver: dns.resolver.Resolver, name: str, rdtype: str) -> tuple[str, ...] | None:
    """The values published at a name for one type (TXT: the joined strings; MX: "<priority> <host>.";
    others: the record's text); () when there are none, None when the resolver did not answer."""
    try:
        answer = resolver.resolve(name, rdtype, search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return ()
    except (dns.name.NameTooLong, dns.name.LabelTooLong, dns.name.EmptyLabel):
        return ()  # a name that cannot exist (one built from a published value) has nothing published
    except (dns.exception.Timeout, dns.resolver.NoNameservers):
        return None
    if rdtype == "TXT":
        return tuple(b"".join(rdata.strings).decode("utf-8", "replace") for rdata in answer)
    if rdtype == "MX":
        return tuple(f"{rdata.preference} {rdata.exchange.to_text()}" for rdata in answer)
    return tuple(rdata.to_text() for rdata in answer)


def record_tags(txt: str) -> dict[str, str]:
    """The `tag=value` pairs of a DKIM or DMARC record, tags lower-cased and values without blanks."""
    pairs = (part.split("=", 1) for part in txt.split(";") if "=" in part)
    return {key.strip().lower(): "".join(value.split()) for key, value in pairs}


def _matches(record: DnsRecord, value: str) -> bool:
    if record.purpose is Purpose.SPF:
        return f"include:{settings.MAILSERVICE_SPF_INCLUDE}".lower() in value.lower().split()
    if record.purpose in _DKIM_PURPOSES.values():
        return record_tags(value).get("p") == record_tags(record.value)["p"]
    if record.purpose is Purpose.RETURN_PATH:
        return dns.name.from_text(value.split()[-1]) == dns.name.from_text(record.value.split()[-1])
    return value.strip() == record.value


def _relevant(record: DnsRecord, value: str) -> bool:
    """Whether a value at the record's name is an attempt at this record (other TXT records share names)."""
    marker = {Purpose.VERIFICATION: VERIFICATION_PREFIX, Purpose.SPF: "v=spf1"}.get(record.purpose, "")
    return value.lower().startswith(marker)


def _outcome(record: DnsRecord, seen: tuple[str, ...] | None) -> DnsOutcome:
    if seen is None:
        return DnsOutcome.UNANSWERED
    if any(_matches(record, value) for value in seen):
        return DnsOutcome.FOUND
    return DnsOutcome.WRONG if any(_relevant(record, value) for value in seen) else DnsOutcome.MISSING


def domain_check_dns(*, domain: Domain) -> DnsCheck:
    """Look every record up; verify the domain when its verification record is published, and switch
    signing to a pending DKIM key when its record is."""
    resolver = dns_resolver()
    keys = dkim_keys_published(domain=domain)
    checks = []
    for record in _records(domain=domain, keys=keys):
        seen = lookup(resolver, record.name, record.type)
        checks.append(RecordCheck(record=record, outcome=_outcome(record, seen), seen=seen or ()))
    verification_found = checks[0].outcome is DnsOutcome.FOUND
    verify = verification_found and not domain.verified
    if verify:
        domain_mark_verified(domain=domain, actor=DNS_CHECK_ACTOR)
    switched_to = ""
    pending = next((key for key in keys if key.state == DkimKeyState.PENDING), None)
    found = {check.record.purpose for check in checks if check.outcome is DnsOutcome.FOUND}
    if pending is not None and Purpose.DKIM_PENDING in found:
        switched_to = dkim_activate(key=pending, found_in_dns=True, actor=DNS_CHECK_ACTOR).selector
    return DnsCheck(checks=checks, verified_now=verify, dkim_switched_to=switched_to)

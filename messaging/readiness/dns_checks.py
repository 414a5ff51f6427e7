"""The readiness check's questions to DNS: will mailbox providers' sender rules (Gmail, Yahoo and
Microsoft since 2024) accept the domain's mail, as far as its records tell? The complaint rate, read
from message counts, is added by messaging/readiness/check.py, which also stores the result.

Every lookup asks the service's resolver (`MAILSERVICE_DNS_RESOLVER`); SPF is evaluated by pyspf, the
organisational domain comes from the public suffix list bundled with `publicsuffixlist` (no download).
"""

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import cache

import dns.exception
import dns.resolver
import dns.reversename
import spf
from django.conf import settings
from publicsuffixlist import PublicSuffixList

from domains.dns import dkim_record, dns_resolver, lookup, record_tags, return_path_domain
from domains.models import DkimKey, DkimKeyState, Domain, DomainReadiness

# RFC 7208 §4.6.4 suggests at least 20 seconds for one whole SPF evaluation.
SPF_EVALUATION_SECONDS = 20
# An address no real record lists (RFC 5737), so evaluating for it walks every term up to `all`.
SPF_PROBE_ADDRESS = "192.0.2.1"
SPF_MAX_LOOKUPS = spf.MAX_LOOKUP  # 10, RFC 7208 §4.6.4
SPF_MAX_VOID_LOOKUPS = spf.MAX_VOID_LOOKUPS  # 2
RELAY_ADDRESSES_CHECKED = 20  # of the relay's networks, the first this many (each is an SPF evaluation)
REPORT_MAILBOX = "dmarc-reports"  # DMARC aggregate reports, at the return-path domain
TLS_REPORT_MAILBOX = "tls-reports"  # SMTP TLS reports (RFC 8460), at the return-path domain


class Status(enum.StrEnum):
    PASS = "pass"  # noqa: S105 - a check status, not a password
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"


@dataclass(frozen=True)
class Check:
    id: str
    status: Status
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {"id": self.id, "status": str(self.status), "detail": self.detail}


@dataclass(frozen=True)
class SourceAddress:
    """An address direct delivery connects from, and the name it gives in EHLO there."""

    address: str
    helo: str


@dataclass(frozen=True)
class Sending:
    """How mail leaves: through the relay (whose SPF `MAILSERVICE_SPF_INCLUDE` names) or, `direct`, from `sources`."""

    direct: bool
    sources: tuple[SourceAddress, ...] = ()


@dataclass(frozen=True)
class Readiness:
    domain: str
    checks: list[Check]

    def as_dict(self) -> dict:
        """The `check_readiness --json` shape: {"domain", "checks": [{"id", "status", "detail"}]}."""
        return {"domain": self.domain, "checks": [check.as_dict() for check in self.checks]}


# --- SPF: pyspf over the service's resolver ------------------------------------------------------


def _spf_dns_lookup(name: str, qtype: str, strict: bool = True, timeout: float = 30) -> list[tuple]:
    """pyspf's DNS hook, in the shape of its own dnspython one, but asking the service's resolver
    (pyspf's asks the system's resolvers); bounded by MAILSERVICE_DNS_TIMEOUT per lookup."""
    resolver = dns_resolver()
    try:
        answer = resolver.resolve(name, qtype, search=False, lifetime=min(timeout, resolver.lifetime))
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer, dns.name.NameTooLong, dns.name.LabelTooLong):
        return []
    except dns.exception.DNSException as exc:  # no answer, SERVFAIL, a malformed reply: try again later
        raise spf.TempError(f"DNS {exc}") from None
    values = {
        "A": lambda rdata: rdata.address,
        "AAAA": lambda rdata: rdata.address,
        "MX": lambda rdata: (rdata.preference, rdata.exchange),
        "PTR": lambda rdata: rdata.target.to_text(True),
        "TXT": lambda rdata: rdata.strings,
        "SPF": lambda rdata: rdata.strings,  # type 99, asked only in pyspf's harsh mode
    }[qtype]
    return [((name, qtype), values(rdata)) for rdata in answer]


# pyspf looks names up through this module-level function; the service has one resolver for everything.
spf.DNSLookup = _spf_dns_lookup


class _SpfQuery(spf.query):
    def cidrmatch(self, ipaddrs: Iterable[str], n: int) -> bool:
        """In list mode, collect each network; pyspf 2.0.14's own fails on a single address (a /32)."""
        if isinstance(self.iplist, list):
            self.iplist.extend(ipaddress.ip_network(f"{ip}/{n}", strict=False) for ip in ipaddrs)
            return False
        return bool(super().cidrmatch(ipaddrs, n))


def _spf_query(*, domain: str, address: str, helo: str, strict: bool = True) -> _SpfQuery:
    return _SpfQuery(
        i=address,
        s=f"postmaster@{domain}",
        h=helo,
        strict=strict,
        timeout=settings.MAILSERVICE_DNS_TIMEOUT,
        querytime=SPF_EVALUATION_SECONDS,
    )


def _relay_addresses(include: str) -> list[str]:
    """The first address of each network the relay's SPF record (MAILSERVICE_SPF_INCLUDE) lists, IPv4 then IPv6."""
    networks = []
    for mode in ("list", "list6"):  # pyspf lists one address family per evaluation
        query = _spf_query(domain=include, address=mode, helo=include)
        query.check()
        networks += query.iplist
    return [str(network.network_address) for network in networks]


def _spf_sources(sending: Sending) -> tuple[list[SourceAddress], str]:
    """The addresses mail leaves from, with what names them; no addresses and the reason when unknown."""
    if sending.direct:
        if not sending.sources:
            return [], "MAILSERVICE_SOURCE_ADDRESSES is unset: the addresses direct delivery leaves from are unknown"
        return list(sending.sources), "direct delivery's source addresses"
    include = settings.MAILSERVICE_SPF_INCLUDE
    if not include:
        return [], "MAILSERVICE_SPF_INCLUDE is unset: the relay's addresses are unknown"
    addresses = _relay_addresses(include)
    if not addresses:
        return [], f"the SPF record of {include} (MAILSERVICE_SPF_INCLUDE) lists no addresses"
    sources = [SourceAddress(address, include) for address in addresses[:RELAY_ADDRESSES_CHECKED]]
    return sources, f"the relay ({include})"


def spf_check(*, mail_from: str, sending: Sending) -> Check:
    """Does the MAIL FROM domain's SPF record pass every address mail leaves from?"""
    sources, described = _spf_sources(sending)
    if not sources:
        return Check("spf", Status.WARN if sending.direct else Status.SKIP, described)
    results = []
    query = _spf_query(domain=mail_from, address=sources[0].address, helo=sources[0].helo)
    for source in sources:  # one query object: its cache serves every address's evaluation
        query.set_ip(source.address)
        query.h = source.helo
        result, _code, explanation = query.check()
        results.append((source.address, result, explanation))
    failed = [f"{address} {result} ({explanation})" for address, result, explanation in results if result != "pass"]
    if not failed:
        return Check("spf", Status.PASS, f"{mail_from} passes {described}: {', '.join(a for a, _, _ in results)}")
    unanswered = all(result == "temperror" for _, result, _ in results if result != "pass")
    return Check(
        "spf",
        Status.WARN if unanswered else Status.FAIL,
        f"{mail_from} does not pass {described}: {'; '.join(failed)}",
    )


def spf_lookups_check(*, mail_from: str) -> Check:
    """RFC 7208 §4.6.4: at most 10 DNS-querying terms (include, a, mx, ptr, exists, redirect), at most 2
    void lookups. Counted by evaluating for an address no record lists, leniently, so the count goes on past 10."""
    query = _spf_query(domain=mail_from, address=SPF_PROBE_ADDRESS, helo=mail_from, strict=False)
    result, _code, explanation = query.check()
    if result == "none":
        return Check("spf_lookups", Status.SKIP, f"{mail_from} has no SPF record")
    if result == "temperror":
        return Check("spf_lookups", Status.WARN, f"{mail_from}: {explanation}")
    if query.void_lookups > SPF_MAX_VOID_LOOKUPS:
        return Check(
            "spf_lookups",
            Status.FAIL,
            f"{mail_from}: more than {SPF_MAX_VOID_LOOKUPS} void lookups (names with no record);"
            " receivers answer permerror",
        )
    counted = f"{query.lookups} DNS-querying terms (at most {SPF_MAX_LOOKUPS}), {query.void_lookups} void lookups"
    if query.lookups > SPF_MAX_LOOKUPS:
        return Check("spf_lookups", Status.FAIL, f"{mail_from}: {counted}; receivers answer permerror")
    return Check("spf_lookups", Status.PASS, f"{mail_from}: {counted}")


# --- DKIM ----------------------------------------------------------------------------------------


def dkim_check(*, resolver: dns.resolver.Resolver, domain: Domain, key: DkimKey | None) -> Check:
    if key is None:
        return Check("dkim", Status.FAIL, "no active DKIM key: nothing is signed")
    record = dkim_record(domain=domain, key=key)
    seen = lookup(resolver, record.name, "TXT")
    if seen is None:
        return Check("dkim", Status.WARN, f"{record.name}: no answer from the resolver")
    wanted = record_tags(record.value)["p"]
    if any(record_tags(value).get("p") == wanted for value in seen):
        return Check("dkim", Status.PASS, f"{record.name} publishes the signing key (selector {key.selector})")
    if seen:
        return Check("dkim", Status.FAIL, f"{record.name} publishes another key: publish {record.value}")
    return Check("dkim", Status.FAIL, f"{record.name} has no record: publish {record.value}")


# --- DMARC ---------------------------------------------------------------------------------------


@cache
def _public_suffixes() -> PublicSuffixList:
    return PublicSuffixList()  # the list bundled with the package, read once per process


def organisational_domain(name: str) -> str:
    """RFC 7489 §3.2: the public suffix plus one label (`mail.example.co.uk` -> `example.co.uk`)."""
    return _public_suffixes().privatesuffix(name.lower().rstrip(".")) or name.lower().rstrip(".")


@dataclass(frozen=True)
class Dmarc:
    """The DMARC record that applies to a domain (RFC 7489 §6.6.3), or why none does."""

    checked: str  # the From domain
    found_at: str  # the domain whose `_dmarc` name holds the record: the checked one or its organisational domain
    tags: dict[str, str] | None  # None: no record applies
    problem: str = ""  # why none applies
    unanswered: bool = False

    @property
    def policy(self) -> str:
        """The policy for the checked domain: `sp`, when given, if the record is its organisational domain's."""
        tags = self.tags or {}
        inherited = self.found_at != self.checked
        return (tags.get("sp") if inherited else None) or tags.get("p", "")


def dmarc_lookup(*, resolver: dns.resolver.Resolver, name: str) -> Dmarc:
    """The record at `_dmarc.<name>`, else at `_dmarc.<organisational domain>`."""
    candidates = list(dict.fromkeys([name, organisational_domain(name)]))
    for candidate in candidates:
        seen = lookup(resolver, f"_dmarc.{candidate}", "TXT")
        if seen is None:
            return Dmarc(name, candidate, None, f"_dmarc.{candidate}: no answer from the resolver", unanswered=True)
        records = [value for value in seen if value.replace(" ", "").lower().startswith("v=dmarc1")]
        if len(records) > 1:
            return Dmarc(name, candidate, None, f"_dmarc.{candidate} has {len(records)} DMARC records: none applies")
        if records:
            return Dmarc(name, candidate, record_tags(records[0]))
    where = " or ".join(f"_dmarc.{candidate}" for candidate in candidates)
    return Dmarc(name, name, None, f"no DMARC record at {where}")


def dmarc_check(*, dmarc: Dmarc) -> Check:
    if dmarc.tags is None:
        return Check("dmarc", Status.WARN if dmarc.unanswered else Status.FAIL, dmarc.problem)
    where = f"_dmarc.{dmarc.found_at}" + (" (the organisational domain's)" if dmarc.found_at != dmarc.checked else "")
    policy = dmarc.policy
    detail = f"{where}: policy {policy or '(none given)'}, pct={dmarc.tags.get('pct', '100')}"
    if policy in {"quarantine", "reject"}:
        return Check("dmarc", Status.PASS, detail)
    if policy == "none":
        return Check("dmarc", Status.WARN, f"{detail}: monitoring only, providers expect quarantine or reject in time")
    return Check("dmarc", Status.FAIL, f"{detail}: p= must be none, quarantine or reject")


def _aligned(identifier: str, author: str, mode: str) -> bool:
    """RFC 7489 §3.1: strict needs the same name, relaxed the same organisational domain."""
    identifier, author = identifier.lower().rstrip("."), author.lower().rstrip(".")
    if mode == "s":
        return identifier == author
    return organisational_domain(identifier) == organisational_domain(author)


def alignment_check(*, domain: Domain, key: DkimKey | None, dmarc: Dmarc, mail_from: str) -> Check:
    """DKIM d= is the From domain itself (the service signs as the domain); SPF aligns only when the
    return-path domain shares the From domain's organisational domain (or equals it, with aspf=s)."""
    tags = dmarc.tags or {}
    dkim_aligned = key is not None and _aligned(domain.name, domain.name, tags.get("adkim", "r"))
    spf_mode = tags.get("aspf", "r")
    spf_aligned = _aligned(mail_from, domain.name, spf_mode)
    spf_text = f"SPF return path {mail_from} {'aligns' if spf_aligned else 'does not align'} (aspf={spf_mode})"
    if not dkim_aligned:
        status = Status.WARN if spf_aligned else Status.FAIL
        return Check("alignment", status, f"no DKIM signature (no active key); {spf_text}")
    dkim_text = f"DKIM d={domain.name} aligns"
    if spf_aligned:
        return Check("alignment", Status.PASS, f"{dkim_text}; {spf_text}")
    return Check("alignment", Status.WARN, f"{dkim_text}; {spf_text}: DMARC passes on DKIM alone")


def _rua_addresses(tags: dict[str, str]) -> list[str]:
    """The mailto: addresses of `rua`, lower-cased, each without its `!size` limit (RFC 7489 §6.2)."""
    uris = (uri.strip() for uri in tags.get("rua", "").split(","))
    return [uri[len("mailto:") :].split("!", 1)[0].lower() for uri in uris if uri.lower().startswith("mailto:")]


def dmarc_reports_check(*, resolver: dns.resolver.Resolver, dmarc: Dmarc) -> Check:
    """`rua` sends aggregate reports to the service; a report address on another organisational domain
    needs that domain's RFC 7489 §7.1 authorisation record."""
    report_domain = settings.MAILSERVICE_RETURN_PATH_DOMAIN
    if not report_domain:
        return Check("dmarc_reports", Status.SKIP, "MAILSERVICE_RETURN_PATH_DOMAIN is unset: no report address")
    address = f"{REPORT_MAILBOX}@{report_domain.lower().rstrip('.')}"
    if dmarc.tags is None:
        return Check(
            "dmarc_reports",
            Status.WARN,
            f'{dmarc.problem}; publish _dmarc.{dmarc.checked} TXT "v=DMARC1; p=none; rua=mailto:{address}"',
        )
    ruas = _rua_addresses(dmarc.tags)
    if address not in ruas:
        rua = ",".join(f"mailto:{rua}" for rua in [*ruas, address])
        return Check(
            "dmarc_reports",
            Status.WARN,
            f"rua of _dmarc.{dmarc.found_at} does not include mailto:{address}: set rua={rua}",
        )
    rua_domain = address.rsplit("@", 1)[1]
    if organisational_domain(rua_domain) == organisational_domain(dmarc.found_at):
        return Check("dmarc_reports", Status.PASS, f"reports go to {address}")
    name = f"{dmarc.found_at}._report._dmarc.{rua_domain}"
    seen = lookup(resolver, name, "TXT")
    if seen is None:
        return Check("dmarc_reports", Status.WARN, f"{name}: no answer from the resolver")
    if any(value.replace(" ", "").lower().startswith("v=dmarc1") for value in seen):
        return Check("dmarc_reports", Status.PASS, f"reports go to {address}, authorised by {name}")
    return Check(
        "dmarc_reports",
        Status.WARN,
        f'{rua_domain} has not authorised reports for {dmarc.found_at} (RFC 7489 §7.1): publish {name} TXT "v=DMARC1"',
    )


# --- PTR -----------------------------------------------------------------------------------------


def _ptr_problem(resolver: dns.resolver.Resolver, source: SourceAddress) -> str:
    """Why a source address's reverse DNS fails the providers' rule, or "" when it passes."""
    helo = source.helo.lower().rstrip(".")
    names = lookup(resolver, dns.reversename.from_address(source.address).to_text(), "PTR")
    if names is None:
        return f"{source.address}: no answer from the resolver"
    if not names:
        return f"{source.address} has no PTR record"
    names = tuple(name.lower().rstrip(".") for name in names)
    if helo not in names:
        return f"{source.address} has PTR {', '.join(names)}, not its HELO name {helo}"
    family = "AAAA" if ipaddress.ip_address(source.address).version == 6 else "A"
    forward = lookup(resolver, helo, family) or ()
    if ipaddress.ip_address(source.address) not in {ipaddress.ip_address(value) for value in forward}:
        return f"{helo} (the PTR of {source.address}) does not resolve back to it"
    return ""


def ptr_check(*, resolver: dns.resolver.Resolver, sending: Sending) -> Check:
    if not sending.direct:
        return Check("ptr", Status.SKIP, "mail leaves through the relay, whose operator keeps its reverse DNS")
    if not sending.sources:
        return Check(
            "ptr", Status.WARN, "MAILSERVICE_SOURCE_ADDRESSES is unset: the addresses mail leaves from are unknown"
        )
    problems = [problem for source in sending.sources if (problem := _ptr_problem(resolver, source))]
    if problems:
        return Check("ptr", Status.FAIL, "; ".join(problems))
    named = ", ".join(f"{source.address} = {source.helo}" for source in sending.sources)
    return Check("ptr", Status.PASS, f"PTR and HELO name agree and resolve back: {named}")


# --- all together --------------------------------------------------------------------------------


def readiness_dns_checks(*, domain: Domain, sending: Sending) -> list[Check]:
    """Every check that asks DNS, in the order of `check_readiness`'s output. Raises ValidationFailed
    when MAILSERVICE_DNS_RESOLVER is malformed."""
    resolver = dns_resolver()
    key = DkimKey.objects.filter(domain=domain, state=DkimKeyState.ACTIVE).defer("private_key").first()
    mail_from = return_path_domain(domain=domain)
    dmarc = dmarc_lookup(resolver=resolver, name=domain.name)
    return [
        spf_check(mail_from=mail_from, sending=sending),
        spf_lookups_check(mail_from=mail_from),
        dkim_check(resolver=resolver, domain=domain, key=key),
        dmarc_check(dmarc=dmarc),
        alignment_check(domain=domain, key=key, dmarc=dmarc, mail_from=mail_from),
        ptr_check(resolver=resolver, sending=sending),
        dmarc_reports_check(resolver=resolver, dmarc=dmarc),
    ]


def readiness_save(*, domain: Domain, readiness: Readiness, checked_at: datetime) -> DomainReadiness:
    """Keep the result as the domain's last check, for the console."""
    stored, _ = DomainReadiness.objects.update_or_create(
        domain=domain, defaults={"checks": readiness.as_dict()["checks"], "checked_at": checked_at}
    )
    return stored

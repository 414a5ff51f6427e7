"""The TLS each MX session must have: DANE (RFC 7672), else the domain's MTA-STS policy (RFC 8461),
else opportunistic STARTTLS without a certificate check (RFC 7435).

DANE applies to an MX host when the configured resolver (MAILSERVICE_DNS_RESOLVER: a local
validating resolver; the AD bit of system resolvers is never trusted) answers both the host's
address and its `_<port>._tcp.<host>` TLSA records with the AD bit, and a record is usable:
DANE-EE (3 x x) matches the server's certificate or its public key, ignoring names and dates;
DANE-TA (2 x x) matches a certificate of the presented chain, which must then lead from the server's
certificate to it, valid for the MX name. A TLSA lookup that fails for a signed host defers.

Every new session's outcome goes to TLS-RPT (messaging/tls_reports/counts.py) under RFC 8460's
result types; a session a policy forbids is never used: TlsRefused, and the recipients are deferred.
"""

import hashlib
import smtplib
import ssl
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache as memoized

import dns.exception
import dns.flags
import dns.resolver
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509 import verification
from django.conf import settings
from django.core.cache import cache

from domains.dns import dns_resolver
from messaging.outbound.direct.mta_sts import StsLookup, StsPolicy, cached_policy, verified_tls_context
from messaging.tls_reports.counts import record_tls_outcome

NONE, STS_TESTING, STS_ENFORCE, DANE = "none", "MTA-STS testing", "MTA-STS enforce", "DANE"
STARTTLS_NOT_SUPPORTED = "starttls-not-supported"
VALIDATION_FAILURE = "validation-failure"
TLSA_INVALID = "tlsa-invalid"
DNSSEC_INVALID = "dnssec-invalid"
_CERTIFICATE_FAILURES = {
    10: "certificate-expired",  # X509_V_ERR_CERT_HAS_EXPIRED
    62: "certificate-host-mismatch",  # X509_V_ERR_HOSTNAME_MISMATCH
    2: "certificate-not-trusted",  # unable to get the issuer certificate
    18: "certificate-not-trusted",  # self-signed leaf
    19: "certificate-not-trusted",  # self-signed certificate in the chain
    20: "certificate-not-trusted",  # unable to get the local issuer certificate
    21: "certificate-not-trusted",  # unable to verify the leaf signature
}
_DANE_KEY = "tls:dane:{}"
DANE_MARK_SECONDS = (300, 86_400)  # how long the console shows "DANE" after a lookup: the TLSA TTL, within these


class TlsRefused(Exception):
    """The session a policy demands cannot be had with this host; the message names the policy."""


@dataclass(frozen=True)
class Tlsa:
    usage: int
    selector: int
    mtype: int
    data: bytes

    def __str__(self) -> str:
        return f"{self.usage} {self.selector} {self.mtype} {self.data.hex()}"


@dataclass(frozen=True)
class HostPolicy:
    """What one MX host's session must be, and what TLS-RPT reports it under."""

    domain: str  # the recipient domain (TLS-RPT's policy domain)
    kind: str = NONE
    strings: tuple[str, ...] = ()
    tlsa: tuple[Tlsa, ...] = ()
    lookup_failure: str = ""  # a failed MTA-STS fetch (RFC 8460 type), reported with sessions under no policy
    sts: StsPolicy | None = None  # the MTA-STS policy, whose mx patterns say which hosts may be used

    @property
    def mandatory(self) -> bool:
        return self.kind in (STS_ENFORCE, DANE)

    @property
    def policy_type(self) -> str:
        if self.kind == DANE:
            return "tlsa"
        return "sts" if self.kind != NONE or self.lookup_failure else "no-policy-found"

    def describe(self) -> str:
        if self.kind == DANE:
            return f"DANE TLSA of {self.domain}'s MX"
        return f"MTA-STS policy of {self.domain} ({self.kind.removeprefix('MTA-STS ')})"


@dataclass(frozen=True)
class Outcome:
    failure: str = ""  # RFC 8460 result type; "" for success
    detail: str = ""
    in_clear: bool = False  # no TLS and the session still usable (STARTTLS not offered)
    retry_unverified: bool = False  # the certificate failed a check a later session may skip


def sts_policy(domain: str, lookup: StsLookup) -> HostPolicy:
    policy = lookup.policy
    if policy is None or policy.mode == "none":
        return HostPolicy(domain, lookup_failure=lookup.failure)
    kind = STS_ENFORCE if policy.mode == "enforce" else STS_TESTING
    return HostPolicy(domain, kind, tuple(policy.strings), sts=policy)


def _authenticated(answer: dns.resolver.Answer) -> bool:
    return answer.response is not None and bool(answer.response.flags & dns.flags.AD)


# DANE's answers (the MX host's address, its TLSA records) kept for their TTL across batches, as the
# routing answers are (messaging/outbound/direct/transport.py), in a cache of their own: these are asked with the AD
# flag, and a kept answer keeps the flags of the response it came in. Without it each batch asked again
# for each host: 9% of direct delivery's worker CPU in the isolation bench, one destination a lane.
DANE_CACHE_SIZE = 10_000


@memoized
def _dane_answer_cache(resolver_address: tuple[object, ...]) -> dns.resolver.LRUCache:
    """One cache per resolver configured (the tests start a DNS server per test)."""
    return dns.resolver.LRUCache(DANE_CACHE_SIZE)


def _dane_resolver() -> dns.resolver.Resolver:
    resolver = dns_resolver()
    resolver.flags = dns.flags.RD | dns.flags.AD  # RFC 6840 §5.7: ask the resolver to report AD
    resolver.cache = _dane_answer_cache((*resolver.nameservers, resolver.port))
    return resolver


def _address_is_signed(resolver: dns.resolver.Resolver, host: str) -> bool:
    for rdtype in ("A", "AAAA"):
        try:
            return _authenticated(resolver.resolve(host, rdtype, search=False))
        except dns.exception.DNSException:
            continue
    return False


def host_policy(domain: str, host: str, port: int, sts: HostPolicy) -> HostPolicy:
    """DANE when the host publishes usable, authenticated TLSA records, else the domain's MTA-STS
    policy `sts`; TlsRefused when the TLSA lookup of a signed host fails."""
    if not settings.MAILSERVICE_DNS_RESOLVER:
        return sts
    resolver = _dane_resolver()
    if not _address_is_signed(resolver, host):
        return sts
    name = f"_{port}._tcp.{host}"
    try:
        answer = resolver.resolve(name, "TLSA", search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return sts
    except dns.exception.DNSException as exc:
        record_tls_outcome(
            policy_domain=domain,
            policy_type="tlsa",
            policy_strings=[],
            mx_host=host,
            receiving_ip="",
            result_type=DNSSEC_INVALID,
        )
        raise TlsRefused(f"DANE TLSA of {domain}'s MX: the lookup of {name} failed ({exc}) for a signed host") from None
    if not _authenticated(answer):
        return sts
    usable = tuple(
        Tlsa(rdata.usage, rdata.selector, rdata.mtype, rdata.cert)
        for rdata in answer
        if rdata.usage in (2, 3) and rdata.selector in (0, 1) and rdata.mtype in (0, 1, 2)
    )
    if not usable:  # RFC 7672 §2.2: no usable record means no DANE
        return sts
    low, high = DANE_MARK_SECONDS
    cache.set(_DANE_KEY.format(domain), 1, timeout=min(max(answer.rrset.ttl if answer.rrset else 0, low), high))
    return HostPolicy(domain, DANE, tuple(str(record) for record in usable), usable)


@memoized
def _unverified_context(minimum: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.minimum_version = minimum
    return context


def _context(policy: HostPolicy) -> ssl.SSLContext:
    if policy.kind in (STS_ENFORCE, STS_TESTING):
        return verified_tls_context(settings.MAILSERVICE_TLS_CA_FILE)
    if policy.kind == DANE:  # the TLSA records, not a CA, say which certificate is right
        return _unverified_context(ssl.TLSVersion.TLSv1_2)
    return _unverified_context(ssl.TLSVersion.MINIMUM_SUPPORTED)


def upgrade(smtp: smtplib.SMTP, *, host: str, policy: HostPolicy) -> Outcome:
    """STARTTLS as `policy` demands, with SNI `host`; the outcome says whether the session may be used."""
    if not smtp.has_extn("starttls"):
        return Outcome(STARTTLS_NOT_SUPPORTED, f"{host} does not offer STARTTLS", in_clear=True)
    # smtplib sends its connection's host (here the address) as SNI and checks the certificate
    # against it: the MX name is the one to name and to check (RFC 8461 §4.2, RFC 7672 §8.1).
    smtp._host = host  # type: ignore[attr-defined]
    try:
        smtp.starttls(context=_context(policy))
        smtp.ehlo()
    except ssl.SSLCertVerificationError as exc:
        failure = _CERTIFICATE_FAILURES.get(exc.verify_code, VALIDATION_FAILURE)
        return Outcome(failure, f"{host}: {exc.verify_message}", retry_unverified=True)
    except (OSError, smtplib.SMTPException) as exc:
        return Outcome(VALIDATION_FAILURE, f"the TLS handshake with {host} failed: {exc}")
    if policy.kind == DANE:
        return _dane_outcome(smtp, host, policy.tlsa)
    return Outcome()


def _presented_chain(smtp: smtplib.SMTP) -> list[bytes]:
    sock = smtp.sock
    # Python 3.13 names it SSLSocket.get_unverified_chain; 3.10-3.12 have it on the inner object only.
    holder = sock if hasattr(sock, "get_unverified_chain") else sock._sslobj  # type: ignore[union-attr]
    chain = holder.get_unverified_chain()  # type: ignore[union-attr]
    return [certificate.public_bytes(2) for certificate in chain or []]  # 2: DER (_ssl.ENCODING_DER)


def _association(der: bytes, record: Tlsa) -> bytes:
    data = der
    if record.selector == 1:
        public_key = x509.load_der_x509_certificate(der).public_key()
        data = public_key.public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if record.mtype == 1:
        return hashlib.sha256(data).digest()
    if record.mtype == 2:
        return hashlib.sha512(data).digest()
    return data


def _chains_to(chain: list[bytes], anchor_index: int, host: str) -> bool:
    """The presented server certificate leads to the matched trust anchor and is valid for `host`."""
    certificates = [x509.load_der_x509_certificate(der) for der in chain]
    verifier = (
        verification.PolicyBuilder()
        .store(verification.Store([certificates[anchor_index]]))
        .time(datetime.now(UTC))
        .build_server_verifier(verification.DNSName(host))
    )
    try:
        verifier.verify(certificates[0], certificates[1:anchor_index])
    except verification.VerificationError:
        return False
    return True


def _dane_outcome(smtp: smtplib.SMTP, host: str, records: tuple[Tlsa, ...]) -> Outcome:
    chain = _presented_chain(smtp)
    if not chain:
        return Outcome(VALIDATION_FAILURE, f"{host} presented no certificate")
    try:
        for record in records:
            if record.usage == 3 and _association(chain[0], record) == record.data:
                return Outcome()
        for record in records:
            if record.usage != 2:
                continue
            for index, der in enumerate(chain[1:], start=1):
                if _association(der, record) == record.data and _chains_to(chain, index, host):
                    return Outcome()
    except ValueError as exc:  # a certificate cryptography cannot read
        return Outcome(VALIDATION_FAILURE, f"{host}: {exc}")
    return Outcome(TLSA_INVALID, f"{host}: no TLSA record matches the certificate it presented")


def record(policy: HostPolicy, *, host: str, address: str, outcome: Outcome) -> None:
    """One session's outcome for TLS-RPT; a failed MTA-STS fetch is reported with sessions it left without policy."""
    record_tls_outcome(
        policy_domain=policy.domain,
        policy_type=policy.policy_type,
        policy_strings=list(policy.strings),
        mx_host=host,
        receiving_ip=address,
        result_type=policy.lookup_failure or outcome.failure,
    )


def destination_tls_policy(*, domain: str) -> str:
    """The TLS policy direct delivery last found for a recipient domain (an A-label), from the cache,
    no lookup (for the console's destinations page): "none", "MTA-STS testing", "MTA-STS enforce" or "DANE"."""
    if cache.get(_DANE_KEY.format(domain)) is not None:
        return DANE
    policy = cached_policy(domain)
    if policy is None or policy.mode == "none":
        return NONE
    return STS_ENFORCE if policy.mode == "enforce" else STS_TESTING

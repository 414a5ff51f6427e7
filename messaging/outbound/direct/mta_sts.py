"""MTA-STS (RFC 8461): a recipient domain's published demand for verified TLS to listed MX hosts.

`_mta-sts.<domain>` TXT (`v=STSv1; id=…`) says a policy exists and its version; the policy itself is
GET https://mta-sts.<domain>/.well-known/mta-sts.txt, with the policy host resolved through the
service's resolver, its certificate verified (the system's store and MAILSERVICE_TLS_CA_FILE), no
redirect followed, at most MAX_POLICY_BYTES within one deadline (MAILSERVICE_SMTP_TIMEOUT) however
the server paces its bytes. Policies are cached in Django's cache (Redis when REDIS_URL is set, so
every worker shares them) for their max_age, and fetched again when the TXT id changes, at most once
per domain per FETCH_INTERVAL_SECONDS (a negative cache, shared the same way): an id that changes on
every lookup, or a policy host that keeps failing, costs one fetch an interval, not one each batch. A
failed fetch keeps using an unexpired cached policy (RFC 8461 §5.1); with none cached there is no
policy, and its failure is reported for the interval.
"""

import ipaddress
import json
import re
import ssl
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache as memoized

import dns.exception
import dns.resolver
from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import ImproperlyConfigured

from mailservice.http_deadline import REQUEST_ERRORS, BodyTooLarge, get_bounded

MAX_POLICY_BYTES = 64 * 1024  # RFC 8461 §3.3: policies are small; a larger body is refused
MAX_AGE_CAP = 31_557_600  # RFC 8461 §3.2: max_age is at most one year
MAX_MX_PATTERNS = 100
MAX_TXT_CHARS = 1024
_ID = re.compile(r"[A-Za-z0-9]{1,32}")
_CACHE_KEY = "mta-sts:policy:{}"
_FETCHED_KEY = "mta-sts:fetched:{}"
# A domain's policy is fetched at most once in this time, whatever its TXT id says: a policy host that
# times out, or an id that changes on every lookup, would otherwise hold every batch to the domain for
# the whole fetch deadline.
FETCH_INTERVAL_SECONDS = 300

# RFC 8460 result types of a policy lookup
FETCH_ERROR = "sts-policy-fetch-error"
POLICY_INVALID = "sts-policy-invalid"
WEBPKI_INVALID = "sts-webpki-invalid"


class PolicyError(Exception):
    """A policy could not be had; `result_type` is its RFC 8460 name."""

    def __init__(self, result_type: str, detail: str) -> None:
        super().__init__(detail)
        self.result_type = result_type


@dataclass(frozen=True)
class StsPolicy:
    id: str
    mode: str  # "enforce", "testing" or "none"
    mx: tuple[str, ...]
    max_age: int
    expires_at: float  # epoch seconds
    text: str  # the policy as fetched (normalised lines), for TLS-RPT's policy-string

    def allows(self, host: str) -> bool:
        """Whether `host` matches an `mx:` pattern; `*.example.com` stands for one left-most label."""
        host = host.lower().rstrip(".")
        for pattern in self.mx:
            if pattern.startswith("*."):
                label, _, rest = host.partition(".")
                if label and rest == pattern[2:]:
                    return True
            elif host == pattern:
                return True
        return False

    @property
    def strings(self) -> list[str]:
        return self.text.splitlines()


@dataclass(frozen=True)
class StsLookup:
    """The policy in force for a domain (None: none), and why a fetch failed, for TLS-RPT ("" when none did)."""

    policy: StsPolicy | None
    failure: str = ""
    detail: str = ""


def parse_policy(text: str, *, policy_id: str, now: float) -> StsPolicy:
    """A policy body by RFC 8461 §3.2 (lines `key: value`); PolicyError(sts-policy-invalid) if it is not one."""
    fields: dict[str, str] = {}
    patterns: list[str] = []
    for line in text.splitlines():
        key, colon, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if not colon or not key:
            if line.strip():
                raise PolicyError(POLICY_INVALID, f"a line is not `key: value`: {line[:80]!r}")
            continue
        if key == "mx":
            if len(patterns) == MAX_MX_PATTERNS:
                raise PolicyError(POLICY_INVALID, f"more than {MAX_MX_PATTERNS} mx patterns")
            patterns.append(value.lower().rstrip("."))
        elif key in ("version", "mode", "max_age") and key in fields:
            raise PolicyError(POLICY_INVALID, f"{key} is given twice")
        else:
            fields[key] = value
    if fields.get("version") != "STSv1":
        raise PolicyError(POLICY_INVALID, "version is not STSv1")
    mode = fields.get("mode", "")
    if mode not in ("enforce", "testing", "none"):
        raise PolicyError(POLICY_INVALID, f"mode {mode[:20]!r} is not enforce, testing or none")
    max_age = fields.get("max_age", "")
    if not max_age.isdigit() or len(max_age) > 10:
        raise PolicyError(POLICY_INVALID, f"max_age {max_age[:20]!r} is not a number of seconds")
    if mode != "none" and not patterns:
        raise PolicyError(POLICY_INVALID, "no mx pattern")
    age = min(int(max_age), MAX_AGE_CAP)
    lines = ["version: STSv1", f"mode: {mode}", *(f"mx: {p}" for p in patterns), f"max_age: {age}"]
    return StsPolicy(policy_id, mode, tuple(patterns), age, now + age, "\n".join(lines))


def _txt_id(resolver: dns.resolver.Resolver, domain: str) -> str | None:
    """The id of the domain's STSv1 TXT record; None when it publishes none (or not exactly one).
    PolicyError when the lookup fails (SERVFAIL, timeout)."""
    try:
        answer = resolver.resolve(f"_mta-sts.{domain}", "TXT", search=False)
    except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
        return None
    except dns.exception.DNSException as exc:
        raise PolicyError(FETCH_ERROR, f"the TXT lookup of _mta-sts.{domain} failed: {exc}") from None
    texts = [b"".join(rdata.strings)[:MAX_TXT_CHARS].decode("ascii", "replace") for rdata in answer]
    records = [text for text in texts if text.startswith("v=STSv1")]
    if len(records) != 1:  # RFC 8461 §3.1: several records mean none
        return None
    tags = dict(part.strip().partition("=")[::2] for part in records[0].split(";") if "=" in part)
    record_id = tags.get("id", "").strip()
    return record_id if _ID.fullmatch(record_id) else None


@memoized
def verified_tls_context(ca_file: str) -> ssl.SSLContext:
    """Certificate and host name checked against the system's store and MAILSERVICE_TLS_CA_FILE, TLS 1.2+."""
    context = ssl.create_default_context()
    try:
        if ca_file:
            context.load_verify_locations(cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ImproperlyConfigured(f"MAILSERVICE_TLS_CA_FILE={ca_file} cannot be loaded: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _policy_address(resolver: dns.resolver.Resolver, host: str, allowed: Callable[[str], bool]) -> str:
    for rdtype in ("A", "AAAA"):
        try:
            found = [record.address for record in resolver.resolve(host, rdtype, search=False)]
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            continue
        except dns.exception.DNSException as exc:
            raise PolicyError(FETCH_ERROR, f"the {rdtype} lookup of {host} failed: {exc}") from None
        usable = [address for address in found if allowed(address)]
        if usable:
            return usable[0]
    raise PolicyError(FETCH_ERROR, f"{host} has no address that may be connected to")


def fetch_policy(
    resolver: dns.resolver.Resolver, domain: str, *, policy_id: str, allowed: Callable[[str], bool]
) -> StsPolicy:
    """GET and parse the domain's policy; PolicyError naming the RFC 8460 result type otherwise."""
    host = f"mta-sts.{domain}"
    address = _policy_address(resolver, host, allowed)
    port = settings.MAILSERVICE_MTA_STS_PORT
    literal = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    try:
        status, content_type, body = get_bounded(
            url=f"https://{literal}:{port}/.well-known/mta-sts.txt",
            host=host if port == 443 else f"{host}:{port}",
            sni_hostname=host,
            ssl_context=verified_tls_context(settings.MAILSERVICE_TLS_CA_FILE),
            timeout=settings.MAILSERVICE_SMTP_TIMEOUT,
            max_bytes=MAX_POLICY_BYTES,
        )
    except BodyTooLarge as exc:
        raise PolicyError(FETCH_ERROR, f"{host}: {exc}") from None
    except REQUEST_ERRORS as exc:
        if "CERTIFICATE_VERIFY_FAILED" in str(exc):
            raise PolicyError(WEBPKI_INVALID, f"{host}: {exc}") from None
        raise PolicyError(FETCH_ERROR, f"{host}: {exc or type(exc).__name__}") from None
    if status != 200:  # a redirect too: RFC 8461 §3.3 forbids following it
        raise PolicyError(FETCH_ERROR, f"{host} answered HTTP {status}")
    if content_type.split(";")[0].strip().lower() != "text/plain":
        raise PolicyError(FETCH_ERROR, f"{host} served {content_type[:60]!r}, not text/plain")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(POLICY_INVALID, f"{host}: the policy is not UTF-8 text") from None
    return parse_policy(text, policy_id=policy_id, now=time.time())


def cached_policy(domain: str) -> StsPolicy | None:
    """The domain's cached policy while unexpired (no network)."""
    raw = cache.get(_CACHE_KEY.format(domain))
    if raw is None:
        return None
    values = json.loads(raw)
    policy = StsPolicy(**{**values, "mx": tuple(values["mx"])})
    return policy if policy.expires_at > time.time() else None


def _store(domain: str, policy: StsPolicy) -> None:
    cache.set(_CACHE_KEY.format(domain), json.dumps(asdict(policy)), timeout=max(policy.max_age, 1))


def policy_for(resolver: dns.resolver.Resolver, domain: str, *, allowed: Callable[[str], bool]) -> StsLookup:
    """The MTA-STS policy in force for `domain` (an A-label): cached unless the TXT id changed."""
    cached = cached_policy(domain)
    try:
        policy_id = _txt_id(resolver, domain)
    except PolicyError as exc:
        return StsLookup(cached, exc.result_type, str(exc))
    if policy_id is None or (cached is not None and cached.id == policy_id):
        # No record (or an unusable one): a cached policy still holds until it expires (RFC 8461 §3.3).
        return StsLookup(cached)
    fetched = cache.get(_FETCHED_KEY.format(domain))
    if fetched is not None:  # fetched within the interval: its failure, if it failed, stands until then
        return StsLookup(cached, fetched.get("result_type", ""), fetched.get("detail", ""))
    try:
        policy = fetch_policy(resolver, domain, policy_id=policy_id, allowed=allowed)
    except PolicyError as exc:
        failure = {"id": policy_id, "result_type": exc.result_type, "detail": str(exc)[:300]}
        cache.set(_FETCHED_KEY.format(domain), failure, timeout=FETCH_INTERVAL_SECONDS)
        return StsLookup(cached, exc.result_type, str(exc))
    cache.set(_FETCHED_KEY.format(domain), {"id": policy_id}, timeout=FETCH_INTERVAL_SECONDS)
    _store(domain, policy)
    return StsLookup(policy)

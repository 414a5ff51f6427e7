"""Where a webhook may be sent: http(s) URLs whose host resolves only to public addresses.

Checked when an operator configures the URL (its host resolved then, so a name that can only ever
be refused is refused up front) and again at every request, on the addresses the request then
connects to (the request goes to the checked address, so a name that resolves elsewhere a moment
later — DNS rebinding — cannot redirect it to the internal network).

An IPv6 address that carries an IPv4 one (mapped, compatible, NAT64, 6to4, Teredo) reaches that
IPv4 address through the host's stack or a translator, so the IPv4 address must be public too.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

from mailservice.errors import ErrorCode, ValidationFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Prefixes whose low 32 bits are the IPv4 address they reach (RFC 4291 §2.5.5, RFC 6052).
_LOW_32_BITS_IPV4 = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated)
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, well-known prefix
)
# Not globally reachable per the IANA registry, though Python 3.11's table says so: NAT64
# local-use (RFC 8215), whose translator is the operator's own network.
_NOT_GLOBAL = (ipaddress.IPv6Network("64:ff9b:1::/48"),)


class TargetRefused(Exception):
    """The URL may not be requested; the message says why."""


@dataclass(frozen=True)
class Target:
    url: str  # the URL with its host replaced by the checked address
    host: str  # the Host header, and the name TLS verifies
    sni_hostname: str


def redacted_url(url: str) -> str:
    """The URL without its userinfo and query, for logs and the console's labels."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "<malformed URL>"
    host = parts.hostname or ""
    literal = f"[{host}]" if ":" in host else host
    return SplitResult(parts.scheme, literal + port, parts.path, "", "").geturl()


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    found = [ipv4 for ipv4 in (address.ipv4_mapped, address.sixtofour) if ipv4 is not None]
    if address.teredo:
        found += address.teredo  # (server, client)
    if any(address in network for network in _LOW_32_BITS_IPV4):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def _allowed(address: IPAddress) -> bool:
    if settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE:
        return True
    if not address.is_global:
        return False
    if address.version == 4:
        return True
    return not any(address in network for network in _NOT_GLOBAL) and all(
        ipv4.is_global for ipv4 in _embedded_ipv4(address)
    )


def _name_refusal(hostname: str) -> str | None:
    """Why a host name that is not an address literal is refused before any lookup, or None.

    A last label that is a number makes the name an IPv4 address in a legacy form (`127.1`,
    `0x7f000001`, `2130706433`): parsers disagree about those, so only the dotted quad is taken."""
    last_label = hostname.rstrip(".").rpartition(".")[2]
    if last_label.isdigit() or (last_label[:2] == "0x" and all(c in "0123456789abcdef" for c in last_label[2:])):
        return f"{hostname} is not an address in dotted-quad form"
    if not settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE and (
        hostname.rstrip(".") == "localhost" or hostname.rstrip(".").endswith(".localhost")
    ):
        return f"{hostname} is a loopback name (MAILSERVICE_WEBHOOK_ALLOW_PRIVATE)"
    return None


def _resolve(hostname: str, port: int) -> list[IPAddress]:
    """Every address the name resolves to; TargetRefused if it does not resolve."""
    try:
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"cannot resolve {hostname}: {exc}") from None
    found = [ipaddress.ip_address(info[4][0]) for info in infos]
    refused = [str(address) for address in found if not _allowed(address)]
    if refused or not found:
        raise TargetRefused(f"{hostname} resolves to a private or loopback address ({', '.join(refused)})")
    return found


def _literal(hostname: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(hostname)
    except ValueError:
        return None


def url_check(url: str) -> None:
    """At configuration time: the form of the URL, and the addresses its host is or resolves to."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        port = parts.port
    except ValueError as exc:
        raise ValidationFailed(f"url: {exc}", code=ErrorCode.VALIDATION_ERROR) from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise ValidationFailed("url: an http:// or https:// URL with a host is required")
    address = _literal(hostname)
    if address is not None:
        if not _allowed(address):
            raise ValidationFailed(
                f"url: {hostname} is a private or loopback address (MAILSERVICE_WEBHOOK_ALLOW_PRIVATE)"
            )
        return
    refusal = _name_refusal(hostname)
    if refusal is not None:
        raise ValidationFailed(f"url: {refusal}")
    if settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE:
        return  # every answer would be allowed; the name need not resolve yet
    try:
        _resolve(hostname, port or (443 if parts.scheme == "https" else 80))
    except TargetRefused as exc:
        raise ValidationFailed(f"url: {exc} (MAILSERVICE_WEBHOOK_ALLOW_PRIVATE)") from None


def target_resolve(url: str) -> Target:
    """Resolve the URL's host now and pick the first address; refused if any address is not public."""
    parts = urlsplit(url)
    hostname = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not hostname:
        raise TargetRefused("not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    literal = _literal(hostname)
    if literal is not None and not _allowed(literal):
        raise TargetRefused(f"{hostname} is a private or loopback address")
    address = literal or _resolve(hostname, port)[0]
    netloc = f"[{address}]" if address.version == 6 else str(address)
    if parts.port:
        netloc += f":{parts.port}"
    host = parts.netloc.rpartition("@")[2]
    return Target(url=parts._replace(netloc=netloc).geturl(), host=host, sni_hostname=hostname)

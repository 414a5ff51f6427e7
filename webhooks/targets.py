"""Where a webhook may be sent: http(s) URLs whose host resolves only to public addresses.

Checked when an operator configures the URL (its host resolved then, so a name that can only ever
be refused is refused up front) and again at every request, on the addresses the request then
connects to (the request goes to the checked address, so a name that resolves elsewhere a moment
later — DNS rebinding — cannot redirect it to the internal network).

Which addresses may be connected to is the service's one policy (mailservice.addresses.may_connect),
with MAILSERVICE_WEBHOOK_ALLOW_PRIVATE for this path.
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

from django.conf import settings

from mailservice.addresses import may_connect
from mailservice.errors import ErrorCode, ValidationFailed

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


def _allowed(address: IPAddress) -> bool:
    return may_connect(address, allow_private=settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE)


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

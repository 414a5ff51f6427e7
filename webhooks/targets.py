"""Where a webhook may be sent: http(s) URLs whose host resolves only to public addresses.

Checked when an operator configures the URL and again at every request, on the addresses the
request then connects to (the request goes to the checked address, so a name that resolves
elsewhere a moment later — DNS rebinding — cannot redirect it to the internal network).
"""

import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings

from mailservice.errors import ErrorCode, ValidationFailed


class TargetRefused(Exception):
    """The URL may not be requested; the message says why."""


@dataclass(frozen=True)
class Target:
    url: str  # the URL with its host replaced by the checked address
    host: str  # the Host header, and the name TLS verifies
    sni_hostname: str


def url_check(url: str) -> None:
    """At configuration time: the form of the URL, and its host if it is a literal address."""
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises on a malformed port
    except ValueError as exc:
        raise ValidationFailed(f"url: {exc}", code=ErrorCode.VALIDATION_ERROR) from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise ValidationFailed("url: an http:// or https:// URL with a host is required")
    try:
        address = ipaddress.ip_address(hostname)
    except ValueError:
        return
    if not _allowed(address):
        raise ValidationFailed(f"url: {hostname} is a private or loopback address (MAILSERVICE_WEBHOOK_ALLOW_PRIVATE)")


def _allowed(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    return settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE or address.is_global


def target_resolve(url: str) -> Target:
    """Resolve the URL's host now and pick the first address; refused if any address is not public."""
    parts = urlsplit(url)
    hostname = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not hostname:
        raise TargetRefused("not an http(s) URL")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise TargetRefused(f"cannot resolve {hostname}: {exc}") from None
    found = [ipaddress.ip_address(info[4][0]) for info in infos]
    refused = [str(address) for address in found if not _allowed(address)]
    if refused or not found:
        raise TargetRefused(f"{hostname} resolves to a private or loopback address ({', '.join(refused)})")
    address = found[0]
    literal = f"[{address}]" if address.version == 6 else str(address)
    netloc = f"{literal}:{parts.port}" if parts.port else literal
    host = parts.netloc.rpartition("@")[2]
    return Target(url=parts._replace(netloc=netloc).geturl(), host=host, sni_hostname=hostname)

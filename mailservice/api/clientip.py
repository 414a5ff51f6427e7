import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest


@lru_cache(maxsize=1)
def _trusted_networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


def _is_trusted(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _trusted_networks(tuple(settings.MAILSERVICE_TRUSTED_PROXIES)))


def client_ip(request: HttpRequest) -> str:
    """REMOTE_ADDR, unless the peer is a trusted proxy: then the nearest untrusted X-Forwarded-For hop.

    Walking X-Forwarded-For from the right means a client cannot spoof its address by sending
    its own header: only entries appended by trusted proxies are skipped.
    """
    address = request.META.get("REMOTE_ADDR", "")
    if not _is_trusted(address):
        return address
    hops = [hop.strip() for hop in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _is_trusted(hop):
            return hop
    return hops[0] if hops else address

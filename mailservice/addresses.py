"""Which IP addresses the service may connect to: one policy for every outbound connection.

Webhook requests, MX hosts, MTA-STS policy hosts and TLS-RPT `https:` endpoints all take the
address they are about to connect to (after their own DNS lookup, so a name that resolves elsewhere
a moment later cannot redirect the connection) and ask `may_connect`, with their own
`*_ALLOW_PRIVATE` setting: MAILSERVICE_WEBHOOK_ALLOW_PRIVATE for webhooks, MAILSERVICE_MX_ALLOW_PRIVATE
for the MX, MTA-STS and TLS-RPT paths (test rigs and private relays).

Only globally reachable addresses pass. Python's own table (`is_global`) is not enough: in 3.11 it
calls multicast, NAT64's local-use prefix and the IPv6 forms of private IPv4 addresses global. An
IPv6 address that carries an IPv4 one reaches that address through the host's stack or a
translator (IPv4-mapped and IPv4-compatible, RFC 4291 §2.5.5; NAT64's well-known prefix, RFC 6052;
6to4, RFC 3056), so it is judged by the IPv4 address it carries.
"""

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Prefixes whose low 32 bits are the IPv4 address they reach.
_LOW_32_BITS_IPV4 = (
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible (deprecated), including :: and ::1
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64, well-known prefix
)
# Refused whatever they carry: NAT64 local-use (RFC 8215), whose translator is the operator's own
# network and whose IPv4 position depends on its prefix length, and Teredo (RFC 4380), not globally
# reachable by the IANA registry, whose client address is behind a NAT.
_NEVER = (ipaddress.IPv6Network("64:ff9b:1::/48"), ipaddress.IPv6Network("2001::/32"))


def embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address reaches (mapped, compatible, NAT64, 6to4), or None."""
    if address.version == 4:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if any(address in network for network in _LOW_32_BITS_IPV4):
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None


def may_connect(address: IPAddress | str, *, allow_private: bool) -> bool:
    """Whether the service may open a connection to `address`: a globally reachable unicast address, or
    anything when the path's `*_ALLOW_PRIVATE` setting (`allow_private`) is on. A string that is no IP
    address is refused."""
    if allow_private:
        return True
    if isinstance(address, str):
        try:
            address = ipaddress.ip_address(address)
        except ValueError:
            return False
    if address.version == 6 and any(address in network for network in _NEVER):
        return False
    carried = embedded_ipv4(address)
    if carried is not None:
        return _global_unicast(carried)
    return _global_unicast(address)


def _global_unicast(address: IPAddress) -> bool:
    return address.is_global and not address.is_multicast

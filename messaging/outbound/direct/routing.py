"""Direct delivery's routing (RFC 5321 §5.1, RFC 7505): which hosts take a recipient domain's mail.

The MX hosts of the recipient's domain (as an A-label), in preference order, shuffled among equal
preferences; no MX record makes the domain itself the host (implicit MX). A null MX (`0 .`), a domain
that does not exist or a name that is no domain raises `Undeliverable` with a permanent reply: its
recipients fail at once, with no connection made; a lookup that fails (SERVFAIL, timeout) raises it
with a temporary one, so dispatch defers the message with its backoff. Bounded whatever DNS says: at
most MAX_MX_HOSTS hosts. Which addresses may be connected to is the one address policy's
(mailservice/addresses.py, with MAILSERVICE_MX_ALLOW_PRIVATE). Nothing is kept here: the answers' cache is
the resolver's.
"""

import ipaddress
import random

import dns.exception
import dns.name
import dns.resolver
import idna

from messaging.outbound.envelope import Reply

MAX_MX_HOSTS = 5
_DETAIL_CHARS = 300  # a resolver's or server's error, as quoted in a synthesized reply


class Undeliverable(Exception):
    """No session can be had for a domain; `reply` is synthesized to say why (4xx: later, 5xx: never)."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(str(reply))
        self.reply = reply


def error_brief(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:_DETAIL_CHARS]


def a_label(domain: str) -> str:
    """The domain as DNS asks for it (IDNA 2008 by UTS 46); a permanent failure if it is not a domain name."""
    try:
        return idna.encode(domain.rstrip("."), uts46=True).decode("ascii")
    except UnicodeError as exc:  # idna.IDNAError is one; also an address literal such as [192.0.2.1]
        raise Undeliverable(
            Reply(550, f"5.1.2 {domain} is not a domain name mail can be routed to: {exc}", local=True)
        ) from None


def mx_hosts(resolver: dns.resolver.Resolver, domain: str) -> list[str]:
    """The hosts to try for `domain` (an A-label), best first, at most MAX_MX_HOSTS; Undeliverable if none may be."""
    try:
        answer = resolver.resolve(domain, "MX", search=False)
    except dns.resolver.NXDOMAIN:
        raise Undeliverable(Reply(550, f"5.1.2 the domain {domain} does not exist (NXDOMAIN)", local=True)) from None
    except dns.resolver.NoAnswer:
        return [domain]  # no MX record: the domain is its own mail host (RFC 5321 5.1)
    except dns.exception.DNSException as exc:  # SERVFAIL, a timeout, a malformed answer: ask again later
        raise Undeliverable(Reply(451, f"4.4.3 the MX lookup of {domain} failed: {error_brief(exc)}")) from None
    if any(record.exchange == dns.name.root for record in answer):
        raise Undeliverable(
            Reply(550, f"5.1.10 {domain} accepts no mail: it publishes a null MX (0 .), RFC 7505", local=True)
        )
    by_preference: dict[int, list[str]] = {}
    for record in answer:
        by_preference.setdefault(record.preference, []).append(record.exchange.to_text(omit_final_dot=True).lower())
    hosts: list[str] = []
    for preference in sorted(by_preference):
        equals = by_preference[preference]
        random.shuffle(equals)  # spreads the load over a domain's equal hosts, as RFC 5321 5.1 asks
        hosts += equals
    return list(dict.fromkeys(hosts))[:MAX_MX_HOSTS]


def is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True

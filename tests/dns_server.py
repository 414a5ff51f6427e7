"""A real authoritative DNS server on loopback (dnslib), serving whatever records a test publishes."""

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import dns.resolver
import dns.reversename
from dnslib import AAAA, CNAME, MX, PTR, QTYPE, RCODE, RD, RR, TLSA, TXT, A, DNSRecord
from dnslib.server import BaseResolver, DNSHandler, DNSLogger, DNSServer

from tests.harness import free_port

# CNAME records a reply follows, as a recursive resolver's answer carries the chain; a loop stops here.
MAX_CNAME_HOPS = 20


class Zone(BaseResolver):
    """Records by (name, type); names it has nothing for get NXDOMAIN, other types an empty answer,
    names in `failing` SERVFAIL (a broken authoritative server or a failed DNSSEC validation).
    Answers for names in `authenticated` carry the AD bit, as a validating resolver's for a signed zone.
    A name with a CNAME answers with the chain and what its end has, as a recursive resolver does."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, str], list[RD]] = {}
        self.failing: set[str] = set()
        self.authenticated: set[str] = set()
        self.delay = 0.0  # seconds before each answer: above a resolver's timeout, lookups time out
        # Every answer's TTL: 0, so no resolver's cache keeps what a test changes (a test of the cache sets it).
        self.ttl = 0

    def publish_tlsa(self, name: str, usage: int, selector: int, mtype: int, data: bytes) -> None:
        """A TLSA record (RFC 6698) at `name`, e.g. `_25._tcp.mx.example.test`."""
        self.records.setdefault((name.lower(), "TLSA"), []).append(TLSA(usage, selector, mtype, data))

    def publish_txt(self, name: str, value: str) -> None:
        # One TXT record holds strings of at most 255 bytes; long values (DKIM keys) span several.
        data = value.encode()
        self.records.setdefault((name.lower(), "TXT"), []).append(
            TXT([data[i : i + 255] for i in range(0, len(data), 255)])
        )

    def publish_mx(self, name: str, host: str, priority: int = 10) -> None:
        self.records.setdefault((name.lower(), "MX"), []).append(MX(host, priority))

    def publish_null_mx(self, name: str) -> None:
        """RFC 7505: the domain accepts no mail."""
        self.records.setdefault((name.lower(), "MX"), []).append(MX(".", 0))

    def publish_cname(self, name: str, target: str) -> None:
        self.records[(name.lower(), "CNAME")] = [CNAME(target)]

    def publish_address(self, name: str, address: str) -> None:
        """An A or AAAA record, by the address's form."""
        kind, rdata = ("AAAA", AAAA(address)) if ":" in address else ("A", A(address))
        self.records.setdefault((name.lower(), kind), []).append(rdata)

    def publish_ptr(self, address: str, name: str) -> None:
        """Reverse DNS: the PTR record of an IPv4 or IPv6 address (under in-addr.arpa or ip6.arpa)."""
        reverse = dns.reversename.from_address(address).to_text(omit_final_dot=True)
        self.records.setdefault((reverse.lower(), "PTR"), []).append(PTR(name))

    def resolve(self, request: DNSRecord, handler: DNSHandler) -> DNSRecord:
        time.sleep(self.delay)
        reply = request.reply()
        name, qtype = str(request.q.qname).rstrip(".").lower(), QTYPE[request.q.qtype]
        if name in self.failing:
            reply.header.rcode = RCODE.SERVFAIL
            return reply
        reply.header.ad = int(name in self.authenticated)
        owner = name
        for _ in range(MAX_CNAME_HOPS):
            alias = self.records.get((owner, "CNAME"))
            if not alias or qtype == "CNAME":
                break
            reply.add_answer(RR(owner, QTYPE.CNAME, rdata=alias[0], ttl=self.ttl))
            owner = str(alias[0].label).rstrip(".").lower()
        for rdata in self.records.get((owner, qtype), []):
            reply.add_answer(RR(owner, request.q.qtype, rdata=rdata, ttl=self.ttl))
        if not any(known == name for known, _ in self.records):
            reply.header.rcode = RCODE.NXDOMAIN
        return reply


@contextmanager
def dns_server() -> Iterator[tuple[Zone, str]]:
    """Serve a fresh Zone over UDP and TCP (long answers are truncated over UDP); yields (zone, "host:port")."""
    zone = Zone()
    port = free_port()
    quiet = DNSLogger("-request,-reply,-truncated,-error,-recv,-send,-data")
    servers = [DNSServer(zone, address="127.0.0.1", port=port, tcp=tcp, logger=quiet) for tcp in (False, True)]
    for server in servers:
        # Not dnslib's start_thread: serve_forever's default poll (0.5 s) made each stop take that long.
        threading.Thread(target=server.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    try:
        yield zone, f"127.0.0.1:{port}"
    finally:
        for server in servers:
            server.server.shutdown()
            server.server.server_close()


@contextmanager
def unanswering_dns_server() -> Iterator[str]:
    """A bound UDP socket that reads nothing: queries to it can only time out."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"127.0.0.1:{sock.getsockname()[1]}"


def dkimpy_dnsfunc(address: str) -> Callable[..., bytes]:
    """A dkimpy `dnsfunc` that asks the server at "host:port" (dkimpy's own asks the system's resolvers)."""
    host, _, port = address.rpartition(":")
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers, resolver.port = [host], int(port)

    def txt(name: bytes, timeout: int = 5) -> bytes:
        try:
            answer = resolver.resolve(name.decode(), "TXT", search=False, lifetime=timeout)
        except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
            return b""
        return b"".join(answer[0].strings)

    return txt

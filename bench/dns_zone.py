"""`python -m bench.dns_zone --port N --domains D --hosts H`: the isolation scenario's DNS on 127.0.0.1:N, in a
process of its own (its lookups must not wait on the bench's own Python): destination domain d<n> has two MX
hosts of equal preference, spread round robin over the receivers 127.0.1.1 … 127.0.1.H (bench/mx_receivers.py).
"""

import argparse
import signal
import threading

from dnslib.server import DNSLogger, DNSServer

from bench.mx_receivers import host
from tests.dns_server import Zone


def destination(number: int) -> str:
    """A registrable domain of its own (under the unlisted TLD `example`), so its MX hosts are a destination of
    their own: under one parent (d<n>.isolation.bench.example) every domain rolled up into one, `bench.example`,
    whose connection cap the tarpits then held for all of them."""
    return f"isolation-d{number}.example"


def zone_for(domains: int, hosts: int) -> Zone:
    zone = Zone()
    zone.ttl = 300  # as real MX and address records have: delivery's resolver cache keeps them
    for number in range(domains):
        for which in (0, 1):
            name = f"mx{which}.{destination(number)}"
            zone.publish_mx(destination(number), name, 10)
            zone.publish_address(name, host(1 + (2 * number + which) % hosts))
    return zone


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--domains", type=int, required=True)
    parser.add_argument("--hosts", type=int, required=True)
    args = parser.parse_args()
    zone = zone_for(args.domains, args.hosts)
    quiet = DNSLogger("-request,-reply,-truncated,-error,-recv,-send,-data")
    servers = [DNSServer(zone, address="127.0.0.1", port=args.port, tcp=tcp, logger=quiet) for tcp in (False, True)]
    for server in servers:
        server.start_thread()
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    for server in servers:
        server.stop()

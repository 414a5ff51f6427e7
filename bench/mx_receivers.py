"""`python -m bench.mx_receivers --port N --hosts H [--tarpits T --tarpit-seconds S]`: H discarding
SMTP receivers on 127.0.1.1 … 127.0.1.H (one port, one process, one event loop), the first T of them
tarpits that delay every reply (the banner included) by S seconds, as a destination that slows down
unwanted senders does. The isolation scenario's recipients' mail servers (bench/scenarios/isolation.py).
"""

import argparse
import asyncio
from functools import partial

from aiosmtpd.smtp import SMTP

from bench.sink import Discard, serve_until_signalled


def host(number: int) -> str:
    """The loopback address of receiver `number` (1-based)."""
    return f"127.0.1.{number}"


class Tarpit(asyncio.Protocol):
    """Enough SMTP for a client to deliver, each reply sent `delay` seconds after its command."""

    def __init__(self, delay: float) -> None:
        self.delay, self.buffer, self.in_data = delay, b"", False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._reply(b"220 tarpit.bench.example ESMTP")

    def _reply(self, line: bytes) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(self.delay, lambda: self.transport.is_closing() or self.transport.write(line + b"\r\n"))

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while b"\r\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\r\n")
            self._line(line)

    def _line(self, line: bytes) -> None:
        if self.in_data:
            if line == b".":
                self.in_data = False
                self._reply(b"250 2.0.0 OK: discarded, slowly")
            return
        verb = line[:4].upper()
        if verb == b"DATA":
            self.in_data = True
            self._reply(b"354 go ahead")
        elif verb == b"QUIT":
            self._reply(b"221 bye")
            asyncio.get_running_loop().call_later(self.delay + 0.1, self.transport.close)
        else:  # EHLO, MAIL, RCPT, RSET, NOOP
            self._reply(b"250 OK")


async def serve(port: int, hosts: int, tarpits: int, tarpit_seconds: float) -> None:
    loop = asyncio.get_running_loop()
    discard = partial(SMTP, Discard(throttle_every=0, throttle_seconds=0), hostname="mx.bench.example")
    servers = [
        await loop.create_server(
            partial(Tarpit, tarpit_seconds) if number <= tarpits else discard, host=host(number), port=port
        )
        for number in range(1, hosts + 1)
    ]
    await serve_until_signalled(servers[-1])
    for server in servers:
        server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--tarpits", type=int, default=0)
    parser.add_argument("--tarpit-seconds", type=float, default=20.0)
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.hosts, args.tarpits, args.tarpit_seconds))

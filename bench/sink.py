"""`python -m bench.sink --port N [--tls-cert C --tls-key K] [--throttle-every K --throttle-seconds S]`: an
aiosmtpd server that accepts every message and discards it (with STARTTLS required when given a certificate);
throttling, it answers `421 4.7.0` to every K-th MAIL FROM (and closes the connection) for S seconds from the
first MAIL FROM, as a relay over its rate limit does.

The peer the dispatch scenario delivers to and the inbound and submission scenarios' ceiling, in a
process of its own so its CPU time can be read from /proc (a sink near 100% of a core is the bottleneck).
"""

import argparse
import asyncio
import signal
import ssl
import time
from functools import partial

from aiosmtpd.smtp import SMTP


class Discard:
    def __init__(self, *, throttle_every: int, throttle_seconds: float) -> None:
        self.throttle_every, self.throttle_seconds, self.mails = throttle_every, throttle_seconds, 0
        self.throttle_until = 0.0

    async def handle_MAIL(self, server, session, envelope, address, mail_options) -> str:  # noqa: N802 - aiosmtpd hook
        self.mails += 1
        if self.mails == 1:
            self.throttle_until = time.monotonic() + self.throttle_seconds
        if self.throttle_every and self.mails % self.throttle_every == 0 and time.monotonic() < self.throttle_until:
            asyncio.get_running_loop().call_later(0.05, server.transport.close)  # once the reply is out
            return "421 4.7.0 Too many messages, slow down"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd hook
        return "250 2.0.0 OK: discarded"


async def serve(port: int, handler: Discard, tls: ssl.SSLContext | None = None) -> None:
    loop = asyncio.get_running_loop()
    # A fixed hostname: aiosmtpd would otherwise look the FQDN up for every connection.
    factory = partial(
        SMTP,
        handler,
        hostname="sink.bench.example",
        enable_SMTPUTF8=True,
        decode_data=False,
        tls_context=tls,
        require_starttls=tls is not None,
    )
    await serve_until_signalled(await loop.create_server(factory, host="127.0.0.1", port=port))


async def serve_until_signalled(server: asyncio.Server) -> None:
    """Keep `server` open until SIGTERM or SIGINT (how the bench stops its child servers)."""
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", help="PEM certificate: offer (and require) STARTTLS")
    parser.add_argument("--tls-key", help="PEM key of --tls-cert")
    parser.add_argument("--throttle-every", type=int, default=0, help="answer 421 to every K-th MAIL FROM")
    parser.add_argument("--throttle-seconds", type=float, default=0.0, help="…for this long from the first one")
    args = parser.parse_args()
    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    handler = Discard(throttle_every=args.throttle_every, throttle_seconds=args.throttle_seconds)
    asyncio.run(serve(args.port, handler, context))

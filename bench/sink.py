"""`python -m bench.sink --port N [--tls-cert C --tls-key K]`: an aiosmtpd server that accepts every
message and discards it (with STARTTLS required when given a certificate).

The peer the dispatch scenario delivers to and the inbound and submission scenarios' ceiling, in a
process of its own so its CPU time can be read from /proc (a sink near 100% of a core is the bottleneck).
"""

import argparse
import asyncio
import signal
import ssl
from functools import partial

from aiosmtpd.smtp import SMTP


class Discard:
    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd hook
        return "250 2.0.0 OK: discarded"


async def serve(port: int, tls: ssl.SSLContext | None = None) -> None:
    loop = asyncio.get_running_loop()
    # A fixed hostname: aiosmtpd would otherwise look the FQDN up for every connection.
    factory = partial(
        SMTP,
        Discard(),
        hostname="sink.bench.example",
        enable_SMTPUTF8=True,
        decode_data=False,
        tls_context=tls,
        require_starttls=tls is not None,
    )
    server = await loop.create_server(factory, host="127.0.0.1", port=port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tls-cert", help="PEM certificate: offer (and require) STARTTLS")
    parser.add_argument("--tls-key", help="PEM key of --tls-cert")
    args = parser.parse_args()
    context = None
    if args.tls_cert:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    asyncio.run(serve(args.port, context))

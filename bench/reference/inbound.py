"""`python -m bench.reference.inbound --port N --database-url URL`: the inbound scenario's
durable ceiling, a bare aiosmtpd server whose handler inserts the raw message into `reference_inbound`
and commits before answering 250, the work an inbound server cannot skip without losing acknowledged mail.

`--connections` asynchronous PostgreSQL connections in autocommit (default 4, as the product's default
MAILSERVICE_INBOUND_WORKERS threads, each with its own) take the messages, one statement each at a time,
so commits from concurrent sessions overlap as the product's do.
"""

import argparse
import asyncio
import json
from functools import partial

import psycopg
from aiosmtpd.smtp import SMTP

from bench.sink import serve_until_signalled


class Store:
    def __init__(self, connections: list[psycopg.AsyncConnection]) -> None:
        self.idle: asyncio.Queue[psycopg.AsyncConnection] = asyncio.Queue()
        for connection in connections:
            self.idle.put_nowait(connection)

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd hook
        connection = await self.idle.get()
        try:
            await connection.execute(
                "INSERT INTO reference_inbound (envelope_from, recipients, raw) VALUES (%s, %s, %s)",
                (envelope.mail_from, json.dumps(envelope.rcpt_tos), envelope.content),
            )
        finally:
            self.idle.put_nowait(connection)
        return "250 2.0.0 OK: stored"


async def serve(port: int, database_url: str, connections: int) -> None:
    opened = [await psycopg.AsyncConnection.connect(database_url, autocommit=True) for _ in range(connections)]
    try:
        # A fixed hostname: aiosmtpd would otherwise look the FQDN up for every connection.
        factory = partial(SMTP, Store(opened), hostname="reference.bench.example", decode_data=False)
        loop = asyncio.get_running_loop()
        await serve_until_signalled(await loop.create_server(factory, host="127.0.0.1", port=port))
    finally:
        for connection in opened:
            await connection.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database-url", required=True, help="the PostgreSQL database holding reference_inbound")
    parser.add_argument("--connections", type=int, default=4, help="PostgreSQL connections (default 4)")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.database_url, max(1, args.connections)))

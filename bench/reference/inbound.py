"""`python -m bench.reference.inbound --port N --database-url URL`: the inbound scenario's
durable ceiling, a bare aiosmtpd server whose handler inserts the raw message into `reference_inbound`
and commits before answering 250, the work an inbound server cannot skip without losing acknowledged mail.

One asynchronous PostgreSQL connection in autocommit serves every session, one statement at a time, as the
product's single database thread does.
"""

import argparse
import asyncio
import json
from functools import partial

import psycopg
from aiosmtpd.smtp import SMTP

from bench.sink import serve_until_signalled


class Store:
    def __init__(self, connection: psycopg.AsyncConnection) -> None:
        self.connection = connection

    async def handle_DATA(self, server, session, envelope) -> str:  # noqa: N802 - aiosmtpd hook
        await self.connection.execute(
            "INSERT INTO reference_inbound (envelope_from, recipients, raw) VALUES (%s, %s, %s)",
            (envelope.mail_from, json.dumps(envelope.rcpt_tos), envelope.content),
        )
        return "250 2.0.0 OK: stored"


async def serve(port: int, database_url: str) -> None:
    connection = await psycopg.AsyncConnection.connect(database_url, autocommit=True)
    async with connection:
        # A fixed hostname: aiosmtpd would otherwise look the FQDN up for every connection.
        factory = partial(SMTP, Store(connection), hostname="reference.bench.example", decode_data=False)
        loop = asyncio.get_running_loop()
        await serve_until_signalled(await loop.create_server(factory, host="127.0.0.1", port=port))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--database-url", required=True, help="the PostgreSQL database holding reference_inbound")
    args = parser.parse_args()
    asyncio.run(serve(args.port, args.database_url))

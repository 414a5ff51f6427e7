"""The inbound SMTP server (aiosmtpd): the MX for verified domains and for the return-path domain.

Recipients are checked at RCPT, so mail for anyone else is refused before any data is sent and
the server can never be used as a relay. A message is answered 250 only after it is committed to
the database; if storing fails the answer is 451 and the sending MTA tries again later.
The ORM is synchronous, so each database step runs in a worker thread, off the event loop.
"""

import asyncio
import logging
import signal
import socket
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any, ParamSpec, TypeVar

from aiosmtpd.smtp import SMTP, Envelope, Session
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections

from mailservice import metrics
from messaging.inbound.services import RouteKind, inbound_deliver, recipient_route

logger = logging.getLogger(__name__)

MAX_RECIPIENTS = 100  # per transaction: the minimum RFC 5321 requires; senders retry the rest later

P = ParamSpec("P")
R = TypeVar("R")


CONNECTION_CHECK_SECONDS = 1.0
_checked = threading.local()  # when each worker thread's connection is next checked


def _in_thread(function: Callable[P, R]) -> Callable[P, Any]:
    """Run an ORM call in a worker thread, with a healthy connection (as Django does around a request)."""

    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        # Django checks the connection before each request (CONN_HEALTH_CHECKS) and replaces it once
        # older than CONN_MAX_AGE. Checked before every call, that was one more round trip per message;
        # once a second per thread still catches a connection that died while idle before it is used.
        now = time.monotonic()
        if now >= getattr(_checked, "next", 0.0):
            close_old_connections()
            _checked.next = now + CONNECTION_CHECK_SECONDS
        try:
            return function(*args, **kwargs)
        except Exception:
            close_old_connections()  # a connection that failed is dropped, not used for the next message
            raise

    return sync_to_async(run, thread_sensitive=False)


_route = _in_thread(recipient_route)
_deliver = _in_thread(inbound_deliver)


class RecentRecipients:
    """Recipients found on a verified domain in the last few seconds, accepted again at RCPT without a query.

    Nearly all mail goes to a few addresses, and checking each recipient (a query, in a worker thread)
    was half of the server's CPU time per message in the inbound benchmark. A domain unverified or deleted meanwhile
    is still accepted at RCPT for up to MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS, but none of its
    mail is stored: the write at DATA routes again, and mail it stores for no recipient is refused
    there (550). Refusals are never remembered, so a newly verified domain receives at once.
    """

    LIMIT = 10_000  # addresses: random ones at a verified domain must not grow the process without bound

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until: dict[str, float] = {}

    def __contains__(self, address: str) -> bool:
        return self._until.get(address, 0.0) > time.monotonic()

    def add(self, address: str) -> None:
        if len(self._until) >= self.LIMIT:
            self._until.clear()
        self._until[address] = time.monotonic() + self.seconds


class InboundHandler:
    def __init__(self) -> None:
        self.recent = RecentRecipients(settings.MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS)

    async def handle_RCPT(  # noqa: N802 - the aiosmtpd hook name
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return "452 4.5.3 Too many recipients"
        if address in self.recent:
            envelope.rcpt_tos.append(address)
            return "250 2.1.5 OK"
        try:
            route = await _route(address=address)
        except Exception:
            logger.exception("inbound: could not check recipient %s", address)
            return "451 4.3.0 Temporary failure, try again later"
        if route.kind == RouteKind.REFUSED:
            logger.info("inbound: refused recipient %s from %s", address, session.peer)
            metrics.INBOUND.labels(outcome="refused_recipient").inc()
            return f"550 5.7.1 <{address}>: relay access denied, no such domain here"
        if route.kind == RouteKind.RECEIVED:
            self.recent.add(address)
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        raw = envelope.original_content or b""  # bytes: the server runs with decode_data=False
        try:
            refused = await _deliver(
                envelope_from=envelope.mail_from or "", recipients=list(envelope.rcpt_tos), raw=raw
            )
        except Exception:
            logger.exception("inbound: could not store mail from <%s> to %s", envelope.mail_from, envelope.rcpt_tos)
            metrics.INBOUND.labels(outcome="failed").inc()
            return "451 4.3.0 Temporary failure storing the message, try again later"
        if refused:
            logger.info("inbound: recipients %s from %s are no longer on a verified domain", refused, session.peer)
        if len(refused) == len(envelope.rcpt_tos):
            metrics.INBOUND.labels(outcome="refused").inc()
            return "550 5.7.1 Relay access denied, no such domain here"
        metrics.INBOUND.labels(outcome="stored").inc()
        logger.info("inbound: accepted %d bytes from <%s> to %s", len(raw), envelope.mail_from, envelope.rcpt_tos)
        return "250 2.0.0 OK: queued"


async def serve(*, host: str, port: int, ready: Callable[[], None] = lambda: None) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting and let open sessions finish."""
    loop = asyncio.get_running_loop()
    factory = partial(
        SMTP,
        InboundHandler(),
        data_size_limit=settings.MAILSERVICE_INBOUND_MAX_BYTES,
        # aiosmtpd would look the FQDN up again for every connection.
        hostname=settings.MAILSERVICE_INBOUND_HOST or socket.getfqdn(),
        enable_SMTPUTF8=True,
        decode_data=False,
    )
    server = await loop.create_server(factory, host=host, port=port)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    ready()
    await stop.wait()
    server.close()
    await server.wait_closed()

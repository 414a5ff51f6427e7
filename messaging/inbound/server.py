"""The inbound SMTP server (aiosmtpd): the MX for verified domains and for the return-path domain.

Recipients are checked at RCPT, so mail for anyone else is refused before any data is sent and
the server can never be used as a relay. A message is answered 250 only after it is committed to
the database; if storing fails the answer is 451 and the sending MTA tries again later. Content
that can never be stored (MIME nested too deep to parse, data the database refuses) gets 554
and one log line, and a NUL in MAIL FROM or RCPT TO gets 501/553: retrying cannot help.

The event loop never parses. At most MAILSERVICE_INBOUND_WORKERS messages are received, parsed
and stored at once, each in a thread of a pool of that size (the ORM is synchronous); a further
DATA waits for a slot before its data is read, which bounds peak memory by the number of workers
times the size cap. Parsing has a time budget (MAILSERVICE_INBOUND_PARSE_SECONDS): a message over
it is stored raw, marked unparsed. The loop itself only speaks SMTP, so it keeps greeting and
answering other connections whatever one message costs. STARTTLS is offered when a certificate
is configured (mailservice.tls).
"""

import asyncio
import logging
import re
import socket
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from aiosmtpd.smtp import MISSING, SMTP, Envelope, Session
from django.conf import settings
from django.db import DataError

from mailservice import metrics
from messaging.inbound.routing import RouteKind, recipient_route
from messaging.inbound.services import inbound_deliver
from messaging.rfc5322.parsing import UnparsableMessage
from messaging.smtpd import in_thread, serve_until_signalled, with_connection

logger = logging.getLogger(__name__)

MAX_RECIPIENTS = 100  # per transaction: the minimum RFC 5321 requires; senders retry the rest later

_route = in_thread(recipient_route)
_deliver = with_connection(inbound_deliver)


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


# An address in angle brackets that is plain dot-atoms on both sides of the @ (nearly every MAIL
# FROM and RCPT TO): no quoting, comments, literals or non-ASCII, each of which goes to aiosmtpd's parser.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_PLAIN_ANGLE_ADDRESS = re.compile(rf"<({_ATEXT}(?:\.{_ATEXT})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)>")

END_OF_DATA = b"\r\n.\r\n"
_DOT_STUFFED = re.compile(rb"\r\n\.")


def _marker_overlap(data: bytearray) -> int:
    """How many bytes at the end of `data` begin END_OF_DATA (0 to 4): the rest may still complete it."""
    for length in range(len(END_OF_DATA) - 1, 0, -1):
        if data.endswith(END_OF_DATA[:length]):
            return length
    return 0


class InboundSMTP(SMTP):
    """aiosmtpd's SMTP session with its DATA phase replaced: it starts only once a worker slot is free,
    and it reads the data in chunks up to the end marker rather than line by line.

    aiosmtpd's own loop spends several Python steps per line on the event loop, so a message of
    40,000 empty lines held the loop for most of a second and delayed every other session; here
    a chunk is found by StreamReader.readuntil (a bytes search) and the dots are unstuffed at the
    end by one regular expression: a few steps per kilobyte.
    """

    def __init__(self, handler: "InboundHandler", **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._slots = handler.slots

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """aiosmtpd's address parser with a fast path: a plain `<local@domain>` is taken as it is.

        aiosmtpd parses every address with the email package's header parser and defines a class on
        each call: a fifth of the time the server held the GIL in the inbound benchmark. A plain address yields
        exactly what that parser would (tests/inbound/test_smtp_addresses.py); anything else is parsed by it.
        """
        plain = _PLAIN_ANGLE_ADDRESS.match(arg)
        rest = arg[plain.end() :] if plain else ""
        if rest[:1] in (" ", "\t"):  # the parser drops the folding white space after the address
            rest = rest.lstrip()
        if plain is None or rest[:1] == "(":  # and a comment with it
            return super()._getaddr(arg)
        address = plain.group(1)
        if self.local_part_limit and address.index("@") > self.local_part_limit:
            return None, None
        return address, rest

    async def smtp_DATA(self, arg: str) -> None:  # noqa: N802 - the aiosmtpd command name
        if await self.check_helo_needed() or await self.check_auth_needed("DATA"):
            return
        envelope = self.envelope
        assert envelope is not None  # aiosmtpd sets it at HELO, which check_helo_needed required
        if not envelope.rcpt_tos:
            await self.push("503 Error: need RCPT command")
            return
        if arg:
            await self.push("501 Syntax: DATA")
            return
        async with self._slots:
            await self.push("354 End data with <CR><LF>.<CR><LF>")
            content = await self._read_data()
            if content is None:
                self._set_post_data_state()
                await self.push("552 5.3.4 Error: too much mail data")
                return
            envelope.content = envelope.original_content = content
            status = await self._call_handler_hook("DATA")
            self._set_post_data_state()
            await self.push("250 OK" if status is MISSING else status)

    async def _read_data(self) -> bytes | None:
        """The message up to the lone dot, unstuffed (RFC 5321 4.5.2); None when over data_size_limit
        (read to its end all the same, keeping only the tail that may begin the end marker)."""
        # The CRLF that ended the DATA command: a lone "." as the first line ends an empty message.
        data = bytearray(b"\r\n")
        over_limit = False
        while not data.endswith(END_OF_DATA):
            overlap = _marker_overlap(data)
            try:
                if overlap:  # only these few bytes can tell whether the marker completes
                    data += await self._reader.readexactly(len(END_OF_DATA) - overlap)
                else:
                    data += await self._reader.readuntil(END_OF_DATA)
            except asyncio.LimitOverrunError as exc:  # no marker within the reader's buffer limit yet
                data += await self._reader.readexactly(exc.consumed)
            if self.data_size_limit and len(data) > self.data_size_limit + len(END_OF_DATA):
                over_limit = True
                del data[: -(len(END_OF_DATA) - 1)]
        if over_limit:
            return None
        return _DOT_STUFFED.sub(b"\r\n", bytes(data[: -len(b".\r\n")]))[2:]


class InboundHandler:
    def __init__(self) -> None:
        self.recent = RecentRecipients(settings.MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS)
        workers = settings.MAILSERVICE_INBOUND_WORKERS
        self.slots = asyncio.Semaphore(workers)
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="inbound")

    async def handle_MAIL(  # noqa: N802 - the aiosmtpd hook name
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        if "\x00" in address:
            logger.info("inbound: refused a sender with a NUL character from %s", session.peer)
            return "501 5.1.7 Bad sender address syntax: NUL character"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    async def handle_RCPT(  # noqa: N802 - the aiosmtpd hook name
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if "\x00" in address:
            logger.info("inbound: refused a recipient with a NUL character from %s", session.peer)
            return "553 5.1.3 Bad recipient address syntax: NUL character"
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
        deliver = partial(
            _deliver,
            envelope_from=envelope.mail_from or "",
            recipients=list(envelope.rcpt_tos),
            raw=raw,
            peer_ip=session.peer[0] if isinstance(session.peer, tuple) else "",
            helo=session.host_name or "",
        )
        try:
            refused = await asyncio.get_running_loop().run_in_executor(self.pool, deliver)
        except (UnparsableMessage, DataError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            logger.warning("inbound: refused %d bytes from <%s> for good: %s", len(raw), envelope.mail_from, reason)
            return "554 5.6.0 Message content cannot be stored; do not retry"
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


async def serve(
    *, host: str, port: int, tls_context: ssl.SSLContext | None = None, ready: Callable[[], None] = lambda: None
) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting and let open sessions finish."""
    loop = asyncio.get_running_loop()
    handler = InboundHandler()
    factory = partial(
        InboundSMTP,
        handler,
        tls_context=tls_context,
        data_size_limit=settings.MAILSERVICE_INBOUND_MAX_BYTES,
        # aiosmtpd would look the FQDN up again for every connection.
        hostname=settings.MAILSERVICE_INBOUND_HOST or socket.getfqdn(),
        enable_SMTPUTF8=True,
        decode_data=False,
    )
    server = await loop.create_server(factory, host=host, port=port)
    await serve_until_signalled(server, ready=ready)
    handler.pool.shutdown(wait=True)

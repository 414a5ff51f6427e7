"""The SMTP submission server (aiosmtpd): applications that only speak SMTP send through it.

STARTTLS (or implicit TLS), then AUTH PLAIN or LOGIN with the user name `apikey` and an API key
with email.send as the password; then the rules of POST /v1/send, as SMTP replies:

    sender not on the key's domain, domain not verified   550 5.7.1
    a display name showing another domain's address       550 5.7.1
    sending paused (nothing is stored)                     451 4.3.2
    daily allowance used up                                452 4.3.1
    51st recipient                                         452 4.5.3
    larger than MAILSERVICE_SUBMISSION_MAX_BYTES           552 (announced with SIZE)
    a header that cannot be read                           554 5.6.0
    a bare CR or bare LF anywhere in the data              554 5.6.0 (SMTP smuggling)
    over the per-IP request limit                          421 4.7.0 (AUTH) / 451 4.7.0 (MAIL)
    too many failed AUTH from the address or for the key  454 4.7.0 until the window ends
    more open sessions from one address than allowed       421 4.7.0, then the connection is closed

Every AUTH attempt and every message count against the API's per-client-IP limit, on the same
counter. Failed AUTH also counts per address and per key named by the password
(MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_IP, _PER_KEY; in Redis, so every server process sees
them). Open sessions are counted per address in each server process
(MAILSERVICE_SUBMISSION_MAX_CONNECTIONS_PER_IP). A message is answered 250 only after it is
committed (with its `accepted` event), so a client that got 250 can forget it; dispatch then
sends it exactly once, like an API send. Database and cache work runs in worker threads, off
the event loop (messaging.smtpd).
"""

import asyncio
import logging
import socket
import ssl
import warnings
from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session
from django.conf import settings

from apikeys.services import key_prefix_of
from mailservice.errors import ApiError, ErrorCode
from mailservice.mailbox import is_mailbox
from mailservice.ratelimit import failure_counted, failures_wait, request_counted
from messaging.rfc5322.rendering import single_line
from messaging.services import DisplayNameRefused
from messaging.smtpd import in_thread, serve_until_signalled
from messaging.submission.services import (
    Submitter,
    submission_accept,
    submission_authenticate,
    submission_sender_check,
)

logger = logging.getLogger(__name__)

MAX_RECIPIENTS = 50  # POST /v1/send's limit on to + cc + bcc


_REPLY_OF_CODE = {
    ErrorCode.SENDER_NOT_ALLOWED: "550 5.7.1",
    ErrorCode.DOMAIN_NOT_VERIFIED: "550 5.7.1",
    ErrorCode.MISSING_PERMISSION: "550 5.7.1",
    ErrorCode.SENDING_PAUSED: "451 4.3.2",
    ErrorCode.ALLOWANCE_EXHAUSTED: "452 4.3.1",
}


def smtp_reply(error: ApiError) -> str:
    """The SMTP reply of a refused send: the API's message behind the code's status (554 5.6.0 otherwise)."""
    status = "550 5.7.1" if isinstance(error, DisplayNameRefused) else _REPLY_OF_CODE.get(error.code, "554 5.6.0")
    return f"{status} {single_line(error.message)[:400]}"


def _submitter(session: Session) -> Submitter:
    """Who authenticated: aiosmtpd refuses MAIL before a successful AUTH (auth_required), whose data this is."""
    assert isinstance(session.auth_data, Submitter)
    return session.auth_data


def _client_ip(session: Session) -> str:
    return str(session.peer[0]) if isinstance(session.peer, tuple) else str(session.peer)


def mail_refusal(*, ip: str, submitter: Submitter, envelope_from: str) -> str | None:
    """MAIL FROM: the reply refusing it (over the request limit, or a sender the key may not use), else None.

    The request count and the sender check in one call: one trip to a worker thread per message."""
    wait = request_counted(ip=ip)
    if wait is not None:
        return f"451 4.7.0 Too many requests; try again in {wait} s"
    try:
        submission_sender_check(submitter=submitter, envelope_from=envelope_from)
    except ApiError as error:
        return smtp_reply(error)
    return None


def _auth_throttles(*, ip: str, password: bytes) -> list[tuple[str, list[str], str]]:
    """(group, keys, rate) of the failed-AUTH counters an attempt from `ip` with `password` is under."""
    throttles = [("submission-auth-ip", [ip], settings.MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_IP)]
    prefix = key_prefix_of(password.decode("ascii", "replace"))
    if prefix is not None:
        throttles.append(("submission-auth-key", [prefix], settings.MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_KEY))
    return throttles


def authenticated(*, ip: str, login: bytes, password: bytes) -> Submitter | str:
    """AUTH: who authenticated, else the reply refusing it. In one call: one trip to a worker thread.

    While the address or the key is at its failure limit even the right key is refused, so a
    guesser learns nothing more until the window ends."""
    wait = request_counted(ip=ip)
    if wait is not None:
        return f"421 4.7.0 Too many requests; try again in {wait} s"
    throttles = _auth_throttles(ip=ip, password=password)
    for group, keys, rate in throttles:
        wait = failures_wait(group=group, keys=keys, rate=rate)
        if wait is not None:
            return f"454 4.7.0 Too many failed authentications; try again in {wait} s"
    submitter = submission_authenticate(login=login, password=password)
    if submitter is None:
        for group, keys, rate in throttles:
            failure_counted(group=group, keys=keys, rate=rate)
        return "535 5.7.8 Authentication credentials invalid"
    return submitter


class SessionSlots:
    """The open sessions of one server process per client address, at most `limit` each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def take(self, ip: str) -> bool:
        if self.open[ip] >= self.limit:
            return False
        self.open[ip] += 1
        return True

    def give_back(self, ip: str) -> None:
        self.open[ip] -= 1
        if self.open[ip] <= 0:
            del self.open[ip]


_authenticated = in_thread(authenticated)
_mail_refusal = in_thread(mail_refusal)
_accept = in_thread(submission_accept)


class SubmissionSMTP(SMTP):
    """aiosmtpd's SMTP with its AUTH PLAIN and LOGIN, the credentials checked in a worker thread,
    and at most `slots.limit` open sessions per client address.

    aiosmtpd parses the exchange and calls a synchronous authenticator; ours only hands the
    credentials back (`_parsed`), and they are checked here, off the event loop."""

    def __init__(self, *args: Any, slots: SessionSlots, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = slots
        self._slot: str | None = None  # the address whose slot this session holds

    async def _handle_client(self) -> None:
        # aiosmtpd's session coroutine, started once per connection before the greeting: the
        # only place to refuse a connection with a reply (it has no connect hook).
        assert self.session is not None and self.transport is not None
        ip = _client_ip(self.session)
        if not self._slots.take(ip):
            logger.info("submission: refused a session from %s: %d open", ip, self._slots.limit)
            await self.push(f"421 4.7.0 Too many open sessions from your address (at most {self._slots.limit})")
            self.transport.close()
            return
        self._slot = ip
        await super()._handle_client()

    def connection_lost(self, error: Exception | None) -> None:
        if self._slot is not None:
            self._slots.give_back(self._slot)
            self._slot = None
        super().connection_lost(error)

    async def auth_PLAIN(self, _: Any, args: list[str]) -> AuthResult:  # noqa: N802 - aiosmtpd's name
        return await self._checked(await super().auth_PLAIN(_, args))

    async def auth_LOGIN(self, _: Any, args: list[str]) -> AuthResult:  # noqa: N802 - aiosmtpd's name
        return await self._checked(await super().auth_LOGIN(_, args))

    async def _checked(self, parsed: AuthResult) -> AuthResult:
        if not parsed.success:
            return parsed
        assert self.session is not None
        credentials = parsed.auth_data
        assert isinstance(credentials, LoginPassword)  # what _parsed hands back
        outcome = await _authenticated(
            ip=_client_ip(self.session), login=credentials.login, password=credentials.password
        )
        if isinstance(outcome, str):
            logger.info("submission: AUTH from %s refused: %s", self.session.peer, outcome[:9])
            return AuthResult(success=False, handled=False, message=outcome)
        return AuthResult(success=True, auth_data=outcome)


def _parsed(server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any) -> AuthResult:
    return AuthResult(success=True, auth_data=auth_data)


class SubmissionHandler:
    async def handle_MAIL(  # noqa: N802 - the aiosmtpd hook name
        self, server: SMTP, session: Session, envelope: Envelope, address: str, mail_options: list[str]
    ) -> str:
        if not is_mailbox(address):
            return "553 5.1.7 The sender address is not an email address"
        try:
            refusal = await _mail_refusal(ip=_client_ip(session), submitter=_submitter(session), envelope_from=address)
        except Exception:
            logger.exception("submission: could not check sender %s", address)
            return "451 4.3.0 Temporary failure, try again later"
        if refusal is not None:
            return refusal
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 2.1.0 OK"

    async def handle_RCPT(  # noqa: N802 - the aiosmtpd hook name
        self, server: SMTP, session: Session, envelope: Envelope, address: str, rcpt_options: list[str]
    ) -> str:
        if len(envelope.rcpt_tos) >= MAX_RECIPIENTS:
            return f"452 4.5.3 Too many recipients (at most {MAX_RECIPIENTS} per message)"
        if not is_mailbox(address):
            return "553 5.1.3 The recipient address is not an email address"
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:  # noqa: N802
        raw = envelope.original_content or b""  # bytes: the server runs with decode_data=False
        try:
            message = await _accept(
                submitter=_submitter(session),
                envelope_from=envelope.mail_from or "",
                recipients=list(envelope.rcpt_tos),
                raw=raw,
            )
        except ApiError as error:
            logger.info("submission: refused mail from <%s>: %s", envelope.mail_from, error.message)
            return smtp_reply(error)
        except Exception:
            logger.exception("submission: could not store mail from <%s>", envelope.mail_from)
            return "451 4.3.0 Temporary failure storing the message, try again later"
        logger.info("submission: accepted %s (%d bytes) from <%s>", message.public_id, len(raw), envelope.mail_from)
        return f"250 2.0.0 OK: queued as {message.public_id}"


def smtp_factory(*, tls: ssl.SSLContext | None, implicit_tls: bool, allow_plaintext_auth: bool) -> Callable[[], SMTP]:
    """The protocol factory: STARTTLS offered with `tls` unless the connection is implicit TLS already."""
    starttls = None if implicit_tls else tls
    return partial(
        SubmissionSMTP,
        SubmissionHandler(),
        slots=SessionSlots(settings.MAILSERVICE_SUBMISSION_MAX_CONNECTIONS_PER_IP),
        data_size_limit=settings.MAILSERVICE_SUBMISSION_MAX_BYTES,
        hostname=settings.MAILSERVICE_INBOUND_HOST or socket.getfqdn(),
        enable_SMTPUTF8=True,
        decode_data=False,
        tls_context=starttls,
        require_starttls=starttls is not None and not allow_plaintext_auth,
        auth_required=True,
        # On an implicit-TLS connection aiosmtpd sees no STARTTLS, yet the connection is encrypted.
        auth_require_tls=not (implicit_tls or allow_plaintext_auth),
        authenticator=_parsed,
    )


async def serve(
    *,
    host: str,
    port: int,
    tls: ssl.SSLContext | None,
    implicit_tls: bool = False,
    ready: Callable[[], None] = lambda: None,
) -> None:
    """Serve until SIGTERM or SIGINT, then stop accepting and let open sessions finish."""
    loop = asyncio.get_running_loop()
    # aiosmtpd logs a warning on every AUTH about its own deprecated attribute, and, on every connection,
    # that AUTH is taken without STARTTLS: with implicit TLS, TLS came first.
    noise = ["Session.login_data is deprecated", *(["auth_require_tls"] if implicit_tls else [])]
    logging.getLogger("mail.log").addFilter(lambda record: not any(text in record.getMessage() for text in noise))
    if implicit_tls:
        warnings.filterwarnings("ignore", message="Requiring AUTH while not requiring TLS", module="aiosmtpd")
    factory = smtp_factory(
        tls=tls, implicit_tls=implicit_tls, allow_plaintext_auth=settings.MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH
    )
    server = await loop.create_server(factory, host=host, port=port, ssl=tls if implicit_tls else None)
    await serve_until_signalled(server, ready=ready)

"""One SMTP client session, as the relay and direct delivery both open it: the server named by a
`RelayConfig`, TLS as configured, and every reply read within bounds.

  smtp://user:pass@host:587    plain SMTP, upgraded with STARTTLS when the relay offers it
  smtp+tls://user:pass@host:587  STARTTLS required (the send fails if it is not offered)
  smtps://user:pass@host:465   implicit TLS

Query parameters: `starttls=required|opportunistic|off` (smtp:// only), `verify=true|false` (the
relay's certificate: chain and host name; on by default), `ca_file=/path/to/ca.pem` (trust these
CAs or this self-signed certificate instead of the system's). Anything else stops start-up.

A session reports what the server answered; it never decides what happens to the message
(messaging/outbound/outcomes.py does). Connection failures raise OSError or smtplib.SMTPException.
When the server offers PIPELINING (RFC 2920) a message takes two round trips: MAIL FROM, RCPT TO and
DATA together, then the data.
"""

import functools
import io
import re
import smtplib
import socket
import ssl
import time
from contextlib import suppress
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from messaging.outbound.envelope import Envelope, Reply, SendResult, Source

T = TypeVar("T")
_STARTTLS = {"required": "starttls", "opportunistic": "starttls-optional", "off": "none"}
_BOOLEANS = {"true": True, "yes": True, "1": True, "on": True, "false": False, "no": False, "0": False, "off": False}


@dataclass(frozen=True)
class RelayConfig:
    host: str
    port: int
    username: str
    password: str
    security: str  # "starttls-optional", "starttls", "tls", "none"
    verify: bool = True
    ca_file: str = ""

    @classmethod
    def from_url(cls, url: str) -> "RelayConfig":
        parts = urlsplit(url)
        security = {"smtp": "starttls-optional", "smtp+tls": "starttls", "smtps": "tls"}.get(parts.scheme)
        if security is None or not parts.hostname:
            # Only the scheme in the message: the URL may carry the relay password.
            raise ImproperlyConfigured(
                f"EMAIL_URL must be smtp://, smtp+tls:// or smtps:// with a host (got a {parts.scheme or 'no'} scheme)"
            )
        options = _options(parts.query)
        if "starttls" in options:
            if parts.scheme != "smtp":
                raise ImproperlyConfigured(
                    f"EMAIL_URL: starttls= is only for smtp:// (the {parts.scheme} scheme fixes it)"
                )
            security = _choice(options, "starttls", _STARTTLS)
        config = cls(
            host=parts.hostname,
            port=parts.port or (465 if security == "tls" else 25),
            username=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            security=security,
            verify=_choice(options, "verify", _BOOLEANS) if "verify" in options else True,
            ca_file=options.get("ca_file", ""),
        )
        if config.ca_file:
            config.ssl_context()  # an unreadable CA file stops start-up here, not at the first send
        return config

    def ssl_context(self) -> ssl.SSLContext:
        return _ssl_context(self.ca_file, self.verify)


@functools.cache
def _ssl_context(ca_file: str, verify: bool) -> ssl.SSLContext:
    """One context per process and setting, shared by every connection (an SSLContext is thread-safe):
    loading the CA store took 25 ms of CPU, paid by each new relay connection before this.
    A CA file changed on disk is read at the next start."""
    try:
        context = ssl.create_default_context(cafile=ca_file or None)
    except (OSError, ssl.SSLError) as exc:
        raise ImproperlyConfigured(f"EMAIL_URL: ca_file={ca_file} cannot be loaded: {exc}") from None
    if not verify:  # encrypted, but anyone in the path could pose as the relay
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _options(query: str) -> dict[str, str]:
    """EMAIL_URL's query parameters; an unknown or repeated one stops start-up (a typo must not
    silently leave certificate checks on or off)."""
    pairs = parse_qsl(query, keep_blank_values=True)
    names = [name for name, _ in pairs]
    unknown = sorted(set(names) - {"starttls", "verify", "ca_file"})
    if unknown:
        raise ImproperlyConfigured(
            f"EMAIL_URL: unknown option(s) {', '.join(unknown)} (known: starttls, verify, ca_file)"
        )
    if len(set(names)) != len(names):
        raise ImproperlyConfigured("EMAIL_URL: an option is given twice")
    return dict(pairs)


def _choice(options: dict[str, str], name: str, allowed: dict[str, T]) -> T:
    value = options[name].lower()
    if value not in allowed:
        raise ImproperlyConfigured(f"EMAIL_URL: {name}={options[name]} is not one of {', '.join(allowed)}")
    return allowed[value]


_LEADING_DOT = re.compile(rb"(?m)^\.")


def _reply(code: int, text: bytes | str) -> Reply:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    return Reply(code, " ".join(text.split()))


@functools.cache
def _fqdn() -> str:
    return socket.getfqdn()  # a DNS lookup: once per process


def helo_name() -> str:
    """The name this service gives in EHLO: MAILSERVICE_HELO_NAME, else this machine's FQDN."""
    return settings.MAILSERVICE_HELO_NAME or _fqdn()


# A reply longer than this is a hostile or broken server, not a mail server's answer: EHLO lists a
# dozen extensions, and RFC 5321 4.5.3.1.5 bounds a reply line at 512 octets.
MAX_REPLY_LINES = 100
MAX_REPLY_BYTES = 64 * 1024
MAX_REPLY_LINE_BYTES = 8192  # as smtplib's own limit


class _DeadlineReader(io.RawIOBase):
    """The session's socket as smtplib reads it, each read bounded by the current reply's deadline:
    a server sending one byte a second never resets the clock, as a per-read timeout would."""

    def __init__(self, smtp: "_BoundedSMTP") -> None:
        self.smtp = smtp
        self.deadline = 0.0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: "memoryview | bytearray") -> int:  # type: ignore[override]
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"the reply did not end within {self.smtp.timeout:g} s")
        sock = self.smtp.sock
        if sock is None:
            raise smtplib.SMTPServerDisconnected("not connected")
        sock.settimeout(min(remaining, self.smtp.timeout))
        try:
            return sock.recv_into(buffer)
        except TimeoutError:
            raise TimeoutError(f"the reply did not end within {self.smtp.timeout:g} s") from None
        finally:
            sock.settimeout(self.smtp.timeout)


class _BoundedSMTP(smtplib.SMTP):
    """smtplib with each reply read within one deadline (the SMTP timeout, for the whole reply) and at
    most MAX_REPLY_LINES lines and MAX_REPLY_BYTES bytes: smtplib reads continuation lines without end."""

    def getreply(self) -> tuple[int, bytes]:
        if self.file is None:  # a new connection, or STARTTLS replaced the socket
            self.file = io.BufferedReader(_DeadlineReader(self))
        reader = self.file.raw
        assert isinstance(reader, _DeadlineReader)
        reader.deadline = time.monotonic() + self.timeout
        lines: list[bytes] = []
        size = 0
        while True:
            try:
                line = self.file.readline(MAX_REPLY_LINE_BYTES + 1)
            except OSError as exc:
                self.close()
                raise smtplib.SMTPServerDisconnected(f"the server's reply failed: {exc}") from None
            if not line:
                self.close()
                raise smtplib.SMTPServerDisconnected("Connection unexpectedly closed")
            size += len(line)
            lines.append(line[4:].strip(b" \t\r\n"))
            if len(line) > MAX_REPLY_LINE_BYTES or len(lines) > MAX_REPLY_LINES or size > MAX_REPLY_BYTES:
                self.close()
                too_long = (
                    f"4.4.2 reply too long (over {MAX_REPLY_LINES} lines, {MAX_REPLY_BYTES} bytes "
                    f"or {MAX_REPLY_LINE_BYTES} bytes a line)"
                )
                raise smtplib.SMTPResponseException(451, too_long)
            try:
                code = int(line[:3])
            except ValueError:
                return -1, b"\n".join(lines)
            if line[3:4] != b"-":
                return code, b"\n".join(lines)


class _BoundedSMTPSSL(_BoundedSMTP, smtplib.SMTP_SSL):
    pass


class SmtpConnection:
    """One SMTP session, to a relay or (messaging/outbound/direct/transport.py) to an MX host: `config.host` is then
    the address connected to, with opportunistic STARTTLS and no certificate check (RFC 7435). With a
    `source` it binds to that local address and gives its name in EHLO; without, the system picks the address."""

    def __init__(self, config: RelayConfig, timeout: float, source: Source | None = None) -> None:
        name = helo_name() if source is None else source.helo
        bind = None if source is None else (source.address, 0)
        if config.security == "tls":
            self.smtp: smtplib.SMTP = _BoundedSMTPSSL(
                config.host,
                config.port,
                local_hostname=name,
                timeout=timeout,
                context=config.ssl_context(),
                source_address=bind,
            )
        else:
            self.smtp = _BoundedSMTP(
                config.host, config.port, local_hostname=name, timeout=timeout, source_address=bind
            )
        try:
            code, text = self.smtp.ehlo()
            if code == 421:  # the server closes the channel at EHLO (RFC 5321 3.8), as a refused greeting does
                raise smtplib.SMTPHeloError(code, text)
            if config.security == "starttls" or (
                config.security == "starttls-optional" and self.smtp.has_extn("starttls")
            ):
                self.smtp.starttls(context=config.ssl_context())
                self.smtp.ehlo()
            if config.username:
                self.smtp.login(config.username, config.password)
        except BaseException:
            self.close()
            raise

    def alive(self) -> bool:
        try:
            return self.smtp.noop()[0] == 250
        except (OSError, smtplib.SMTPException):
            return False

    def reset(self) -> bool:
        """RSET before another transaction on a session kept open; False if the server is gone."""
        try:
            return self.smtp.rset()[0] == 250
        except (OSError, smtplib.SMTPException):
            return False

    def close(self) -> None:
        try:
            self.smtp.quit()
        except (OSError, smtplib.SMTPException):
            self.smtp.close()

    def _command(self, command: str, address: str, options: str = "") -> Reply:
        """MAIL FROM / RCPT TO with the address exactly as given: smtplib's mail() and rcpt() pass
        it through quoteaddr, which re-parses it as a header address (`a:b@x` became `<b@x>`)."""
        self.smtp.putcmd(f"{command}<{address}>{options}")
        return _reply(*self.smtp.getreply())

    def _end(self, reply: Reply) -> None:
        """After a refused transaction: RSET; after a 421 the relay is closing the channel (RFC 5321 3.8),
        so this side closes it too and the pool never hands it out again."""
        if reply.code == 421:
            self.smtp.close()
            return
        with suppress(OSError, smtplib.SMTPException):  # a relay may close without saying 421 first
            self.smtp.rset()

    def send(self, *, envelope: Envelope, data: bytes, name: str) -> SendResult:
        options = ""
        if envelope.smtputf8:
            if not self.smtp.has_extn("smtputf8"):
                needed = "the server does not offer SMTPUTF8, needed for a non-ASCII address"
                return SendResult(final=Reply(553, needed))
            options = " SMTPUTF8 BODY=8BITMIME"
            self.smtp.command_encoding = "utf-8"  # as smtplib's mail() does; rset() goes back to ASCII
        if self.smtp.has_extn("pipelining"):
            return self._send_pipelined(envelope, data, options)
        mail = self._command("mail FROM:", envelope.mail_from, options)
        if mail.code != 250:
            self._end(mail)
            return SendResult(final=mail)
        result = SendResult(final=mail)
        for recipient in envelope.recipients:
            reply = self._command("rcpt TO:", recipient)
            if reply.code in (250, 251):
                result.accepted.append(recipient)
            else:
                result.refused[recipient] = reply
                result.final = reply
                if reply.code == 421:  # nothing more goes over this connection: no recipient got the data
                    self._end(reply)
                    return SendResult(final=reply, refused=result.refused)
        if not result.accepted:
            self._end(result.final)
            return result
        try:
            result.final = _reply(*self.smtp.data(data))
        except smtplib.SMTPDataError as exc:  # the relay refused to start DATA
            result.final = _reply(exc.smtp_code, exc.smtp_error)
            self._end(result.final)
            return result
        if result.final.code == 421:
            self._end(result.final)
        return result

    def _send_pipelined(self, envelope: Envelope, data: bytes, options: str) -> SendResult:
        """`send` in two round trips instead of 3 + recipients (RFC 2920): MAIL FROM, every RCPT TO and
        DATA in one write, then their replies read in the same order, each matched to its command;
        the message data goes only after a 354, and only if a recipient was accepted."""
        commands = [f"mail FROM:<{envelope.mail_from}>{options}", *(f"rcpt TO:<{r}>" for r in envelope.recipients)]
        if any("\r" in command or "\n" in command for command in commands):
            # As smtplib's putcmd refuses them: a line break would inject a command of its own.
            raise ValueError("command and arguments contain prohibited newline characters")
        self.smtp.send("".join(f"{command}\r\n" for command in [*commands, "data"]))
        mail = _reply(*self.smtp.getreply())
        result = SendResult(final=mail)
        if mail.code == 421:  # the relay is closing the channel: no further reply comes
            self._end(mail)
            return result
        for recipient in envelope.recipients:
            reply = _reply(*self.smtp.getreply())
            if mail.code != 250:
                continue  # its 503 "need MAIL" says nothing about the recipient
            if reply.code in (250, 251):
                result.accepted.append(recipient)
            else:
                result.refused[recipient] = reply
                result.final = reply
                if reply.code == 421:
                    self._end(reply)
                    return SendResult(final=reply, refused=result.refused)
        started = _reply(*self.smtp.getreply())
        if started.code == 354 and (mail.code != 250 or not result.accepted):
            # DATA was accepted though nothing may be sent: an empty message ends it, and the transaction is reset.
            self.smtp.send(b".\r\n")
            self.smtp.getreply()
        if mail.code != 250 or not result.accepted:
            self._end(result.final)
            return result
        if started.code != 354:  # the relay refused to start DATA
            result.final = started
            self._end(started)
            return result
        self.smtp.send(_dot_stuffed(data))
        result.final = _reply(*self.smtp.getreply())
        if result.final.code == 421:
            self._end(result.final)
        return result


def _dot_stuffed(data: bytes) -> bytes:
    """The message data as the DATA command carries it (RFC 5321 4.5.2), ended by the lone dot; as smtplib's data()."""
    stuffed = _LEADING_DOT.sub(b"..", data)
    return stuffed + (b"" if stuffed.endswith(b"\r\n") else b"\r\n") + b".\r\n"


def reply_of(exc: BaseException) -> Reply | None:
    """The server's reply carried by an smtplib error (a refused greeting: 421 …), if any."""
    code, text = getattr(exc, "smtp_code", None), getattr(exc, "smtp_error", None)
    if not isinstance(code, int) or text is None:
        return None
    text = text.decode("utf-8", "replace") if isinstance(text, bytes) else str(text)
    return Reply(code, " ".join(text.split()))

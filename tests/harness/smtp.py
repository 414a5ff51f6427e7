"""SMTP peers of live tests: a recording sink (aiosmtpd, in this process) and a readiness probe."""

import asyncio
import email
import email.policy
import smtplib
import socket
import ssl
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, suppress
from dataclasses import dataclass, field

from aiosmtpd.controller import Controller

from tests.harness.process import free_port, wait_until


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes
    peer: tuple[str, int]  # the client's address: one per SMTP connection
    helo: str = ""  # the name the client gave in EHLO
    tls: bool = False  # the session was upgraded with STARTTLS


@dataclass
class SinkBehaviour:
    """What the sink answers; tests change it while it runs."""

    data_replies: list[str] = field(default_factory=list)  # answered to DATA in order, then 250
    rejected_rcpts: dict[str, str] = field(default_factory=dict)  # address -> reply to RCPT TO
    hold: threading.Event | None = None  # DATA waits until this is set (or the client goes away)
    data_reply: str | None = None  # while set, every DATA is answered with it (an outage: 421, 451)
    drop: bool = False  # while set, DATA gets no answer: the connection is cut
    pipelining: bool = False  # advertise PIPELINING (RFC 2920) in the EHLO reply, as most relays do


class _CountingController(Controller):
    """Counts the connections the server accepts (the controller's own start-up probe is one)."""

    def __init__(self, sink: "SmtpSink", **kwargs) -> None:
        super().__init__(sink, **kwargs)
        self.sink = sink

    def factory(self):  # one call per accepted connection
        self.sink.connections += 1
        server = super().factory()
        connection_lost = server.connection_lost

        def counted(error: Exception | None) -> None:
            self.sink.disconnections += 1
            connection_lost(error)

        server.connection_lost = counted
        return server


class SmtpSink:
    """A real SMTP server (aiosmtpd) on a loopback port that records what it accepted.

    Direct-delivery tests run several on one port at other loopback addresses (127.0.0.2, …: Linux
    routes all of 127.0.0.0/8 to the loopback interface), some offering STARTTLS."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        tls_context: ssl.SSLContext | None = None,
        idle_timeout: float = 300,
    ) -> None:
        self.behaviour = SinkBehaviour()
        self.received: list[Received] = []
        self.in_data = 0  # DATA transactions that have started (held or not)
        self.connections = 0  # connections accepted since smtp_sink() started it
        self.disconnections = 0  # of those, the ones that have ended (either side closed)
        self.host = host
        self.port = port or free_port()
        self.controller = _CountingController(
            self, hostname=host, port=self.port, enable_SMTPUTF8=True, tls_context=tls_context, timeout=idle_timeout
        )

    @property
    def url(self) -> str:
        return f"smtp://{self.host}:{self.port}"

    def message_ids(self) -> Counter:
        """How many times each Message-ID was accepted."""
        return Counter(
            email.message_from_bytes(received.data, policy=email.policy.default)["Message-ID"]
            for received in self.received
        )

    async def handle_EHLO(self, server, session, envelope, hostname, responses):  # noqa: N802 - aiosmtpd hook
        session.host_name = hostname
        if not self.behaviour.pipelining:
            return responses
        return [*responses[:-1], "250-PIPELINING", responses[-1]]  # the last line ("250 HELP") ends the reply

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802 - aiosmtpd hook
        if address in self.behaviour.rejected_rcpts:
            return self.behaviour.rejected_rcpts[address]
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd hook
        self.in_data += 1
        hold = self.behaviour.hold
        while hold is not None and not hold.is_set():
            # A client that disconnects cancels this coroutine: nothing is recorded, as a relay
            # that never answered 250 has not taken the message.
            await asyncio.sleep(0.05)
        if self.behaviour.drop:
            server.transport.close()
            return "421 4.3.0 connection dropped"  # never reaches the client
        if self.behaviour.data_reply is not None:
            return self.behaviour.data_reply
        if self.behaviour.data_replies:
            return self.behaviour.data_replies.pop(0)
        self.received.append(
            Received(
                envelope.mail_from,
                list(envelope.rcpt_tos),
                envelope.content,
                session.peer,
                helo=session.host_name or "",
                tls=session.ssl is not None,
            )
        )
        return "250 2.0.0 OK: queued"


@contextmanager
def smtp_sink(
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    tls_context: ssl.SSLContext | None = None,
    idle_timeout: float = 300,
) -> Iterator[SmtpSink]:
    """A running SmtpSink; `idle_timeout`: seconds without a command after which it drops the connection
    unannounced (aiosmtpd's timeout), as a receiver drops a client's idle session."""
    sink = SmtpSink(host=host, port=port, tls_context=tls_context, idle_timeout=idle_timeout)
    sink.controller.start()
    wait_until(lambda: sink.disconnections == 1, timeout=10, message="the start-up probe's connection to end")
    sink.connections = sink.disconnections = 0  # not the controller's start-up probe
    try:
        yield sink
    finally:
        if sink.behaviour.hold is not None:
            sink.behaviour.hold.set()
        sink.controller.stop()


def serves_smtp(port: int) -> bool:
    try:
        with smtplib.SMTP("127.0.0.1", port, timeout=1) as smtp:
            return smtp.noop()[0] == 250
    except (OSError, smtplib.SMTPException):
        return False


@contextmanager
def socket_server(host: str, port: int, behaviour: Callable[[socket.socket], None]) -> Iterator[list[int]]:
    """A raw TCP server (what aiosmtpd cannot be: a peer that breaks SMTP) running `behaviour` on each
    connection, in a thread of its own, until the client goes away; yields the connection count."""
    accepted = [0]
    stop = threading.Event()

    def handle(client: socket.socket) -> None:
        with client, suppress(OSError):  # the client hung up, as it should
            behaviour(client)

    with socket.create_server((host, port)) as server:
        server.settimeout(0.1)

        def serve() -> None:
            while not stop.is_set():
                try:
                    client, _ = server.accept()
                except TimeoutError:
                    continue
                accepted[0] += 1
                threading.Thread(target=handle, args=(client,), daemon=True).start()

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            yield accepted
        finally:
            stop.set()
            thread.join()


def busy_greeter(host: str, port: int, greeting: bytes) -> AbstractContextManager[list[int]]:
    """A server that greets every connection with `greeting` (a 421) and closes it; yields its connection count."""
    return socket_server(host, port, lambda client: client.sendall(greeting))

"""Receivers that never finish a reply: each SMTP step ends within MAILSERVICE_SMTP_TIMEOUT with a
temporary outcome that says why, in relay and in direct (mx://) mode, whatever the server sends."""

import socket
import time
from collections.abc import Callable
from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import Message, Status
from messaging.outbound.direct.transport import MxTransport
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.envelope import Envelope
from messaging.outbound.smtp_client import RelayConfig, SmtpConnection
from tests.dns_server import dns_server
from tests.factories import MessageFactory
from tests.harness import free_port, smtp_sink, socket_server, wait_until

pytestmark = pytest.mark.django_db

TIMEOUT = 1.0


def endless_banner_lines(client: socket.socket) -> None:
    while True:
        client.sendall(b"220-x\r\n" * 100)


def endless_ehlo_lines(client: socket.socket) -> None:
    client.sendall(b"220 hostile.test ESMTP\r\n")
    client.recv(1024)
    while True:
        client.sendall(b"250-x\r\n" * 100)


def dripping_banner(client: socket.socket) -> None:
    """One byte every 0.2 s: each read gets a byte well within a per-read timeout, the reply never ends."""
    for byte in b"220 slow.test ESMTP\r\n" * 100:
        client.sendall(bytes([byte]))
        time.sleep(0.2)


def huge_banner_line(client: socket.socket) -> None:
    client.sendall(b"220 ")
    while True:
        client.sendall(b"x" * 65536)


BEHAVIOURS: dict[str, tuple[Callable[[socket.socket], None], str]] = {
    "endless banner continuation lines": (endless_banner_lines, "4.4.2 reply too long"),
    "endless EHLO continuation lines": (endless_ehlo_lines, "4.4.2 reply too long"),
    "a banner sent a byte at a time": (dripping_banner, "the reply did not end within 1 s"),
    "a gigabyte banner line": (huge_banner_line, "4.4.2 reply too long"),
}


@pytest.mark.parametrize("behaviour", BEHAVIOURS, ids=list(BEHAVIOURS))
def test_a_relay_that_never_ends_a_reply_gives_a_bounded_temporary_outcome(settings, behaviour):
    port = free_port()
    settings.EMAIL_URL = f"smtp://127.0.0.1:{port}?starttls=off"
    settings.MAILSERVICE_SMTP_TIMEOUT = TIMEOUT
    action, expected = BEHAVIOURS[behaviour]
    message = MessageFactory(next_attempt_at=timezone.now() - timedelta(seconds=1))

    with socket_server("127.0.0.1", port, action):
        started = time.monotonic()
        dispatch_batch()
        elapsed = time.monotonic() - started

    message.refresh_from_db()
    assert message.status == Status.ACCEPTED and message.attempts == 1
    assert expected in message.last_error
    assert elapsed < 2 * TIMEOUT + 1


def test_a_reply_at_the_line_cap_is_read_whole():
    def ehlo_of_99_lines(client: socket.socket) -> None:
        client.sendall(b"220 fine.test ESMTP\r\n")
        client.recv(1024)
        client.sendall(b"250-fine.test\r\n" + b"250-X-PAD\r\n" * 98 + b"250 PIPELINING\r\n")
        client.recv(1024)

    port = free_port()
    with socket_server("127.0.0.1", port, ehlo_of_99_lines):
        connection = SmtpConnection(RelayConfig("127.0.0.1", port, "", "", "none"), TIMEOUT)
        assert connection.smtp.has_extn("pipelining")
        connection.smtp.close()


@pytest.mark.parametrize("behaviour", ["endless EHLO continuation lines", "a banner sent a byte at a time"])
def test_a_hostile_mx_gives_a_temporary_reply_naming_it(settings, behaviour):
    settings.EMAIL_URL = "mx://"
    settings.MAILSERVICE_MX_PORT = port = free_port()
    settings.MAILSERVICE_SMTP_TIMEOUT = TIMEOUT
    action, expected = BEHAVIOURS[behaviour]
    with dns_server() as (zone, address), socket_server("127.0.0.2", port, action):
        settings.MAILSERVICE_DNS_RESOLVER = address
        zone.publish_mx("hostile.test", "mx.hostile.test")
        zone.publish_address("mx.hostile.test", "127.0.0.2")
        started = time.monotonic()
        with MxTransport().connection() as connection:
            envelope = Envelope(mail_from="a@acme.test", recipients=["bob@hostile.test"], smtputf8=False)
            result = connection.send(envelope=envelope, data=b"Subject: hi\r\n\r\nhi\r\n", name="m")

    assert result.final.code == 451 and "mx.hostile.test [127.0.0.2]" in result.final.text
    assert expected in result.final.text
    assert time.monotonic() - started < 2 * TIMEOUT + 1


def slow_replies(client: socket.socket) -> None:
    """Enough SMTP to deliver, each reply (the banner included) DELAY seconds after its command."""
    reader = client.makefile("rb")
    in_data = False
    time.sleep(DELAY)
    client.sendall(b"220 slow.test ESMTP\r\n")
    for line in reader:
        command = line.rstrip(b"\r\n")
        if in_data:
            in_data = command != b"."
            if in_data:
                continue
            reply = b"250 queued, slowly"
        else:
            verb = command[:4].upper()
            in_data = verb == b"DATA"
            reply = {b"DATA": b"354 go ahead", b"QUIT": b"221 bye"}.get(verb, b"250 OK")
        time.sleep(DELAY)
        client.sendall(reply + b"\r\n")


DELAY = 0.5  # a message takes 6 replies: 3 s


@pytest.mark.django_db(transaction=True)  # the slow lane's outcomes are recorded by a thread of their own
def test_a_slow_destination_delays_only_its_own_messages(settings):
    settings.EMAIL_URL = "mx://"
    settings.MAILSERVICE_MX_PORT = port = free_port()
    settings.MAILSERVICE_SMTP_TIMEOUT = 3.0
    due = timezone.now() - timedelta(seconds=1)
    with (
        dns_server() as (zone, address),
        socket_server("127.0.0.2", port, slow_replies),
        smtp_sink(host="127.0.0.3", port=port) as fast,
    ):
        settings.MAILSERVICE_DNS_RESOLVER = address
        for domain, host in (("slow.test", "127.0.0.2"), ("fast.test", "127.0.0.3")):
            zone.publish_mx(domain, f"mx.{domain}")
            zone.publish_address(f"mx.{domain}", host)
        slow = [MessageFactory(to=["u@slow.test"], next_attempt_at=due)]
        quick = [MessageFactory(to=[f"u{n}@fast.test"], next_attempt_at=due) for n in range(3)]

        started = time.monotonic()
        dispatch_batch()
        batch_seconds = time.monotonic() - started
        delivered_meanwhile = Message.objects.filter(pk__in=[m.pk for m in slow], status=Status.DELIVERED).count()
        time.sleep(max(0.0, 2.3 - batch_seconds))  # its message has now been in flight for over 2 s
        later = MessageFactory(to=["late@slow.test"], next_attempt_at=due)
        dispatch_batch()
        wait_until(
            lambda: Message.objects.filter(pk__in=[m.pk for m in slow], status=Status.DELIVERED).count() == 1,
            timeout=10,
            message="the slow destination's messages",
        )

    assert batch_seconds < 1.5 and delivered_meanwhile == 0
    assert len(fast.received) == 3
    assert set(Message.objects.filter(pk__in=[m.pk for m in quick]).values_list("status", flat=True)) == {
        Status.DELIVERED
    }
    later.refresh_from_db()
    assert (later.status, later.attempts) == (Status.ACCEPTED, 0)
    assert "slow.test is slow" in later.last_error

"""Slow receivers cost others nothing (issue 40, item 5): 10 tarpitting destinations (a banner 20 s late
and then silence, no banner at all, every reply 20 s late) beside 20 healthy ones, sent by one worker on the
Procfile's settings (one process, 5 dispatch threads) with the production SMTP timeout (30 s). The healthy
destinations' 40 messages must arrive within 1.5 times their time without the tarpits, plus 10 s.

Each run has healthy destinations of its own, so the second gains nothing from sessions the first left idle."""

import socket
import time
import uuid
from collections.abc import Callable

import pytest

from mailservice.doorbell import wake_dispatchers
from messaging.models import Message, Status
from tests.factories import DomainFactory
from tests.harness import FAST_DISPATCH, celery_worker, free_port, smtp_sink, socket_server, wait_until
from tests.messaging.test_delivery_control_live import queue

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HEALTHY, TARPITS, PER_DOMAIN = 20, 10, 2
TARPIT_SECONDS = 20.0
PROCFILE_THREADS = 5


def _gone(client: socket.socket, seconds: float) -> bool:
    """Wait up to `seconds` for the client to hang up (True) without answering it."""
    client.settimeout(seconds)
    try:
        return client.recv(4096) == b""
    except TimeoutError:
        return False


def late_banner(client: socket.socket) -> None:
    if not _gone(client, TARPIT_SECONDS):
        client.sendall(b"220 tarpit ESMTP\r\n")
        _gone(client, 120)


def no_banner(client: socket.socket) -> None:
    _gone(client, 120)


def slow_replies(client: socket.socket) -> None:
    """A working SMTP server whose every reply comes TARPIT_SECONDS late."""
    time.sleep(TARPIT_SECONDS)
    client.sendall(b"220 tarpit ESMTP\r\n")
    client.settimeout(120)
    buffer, in_data = b"", False
    while chunk := client.recv(65536):
        buffer += chunk
        while True:
            if in_data:
                end = buffer.find(b"\r\n.\r\n")
                if end < 0:
                    break
                buffer, in_data = buffer[end + 5 :], False
                reply = b"250 2.0.0 queued"
            else:
                line, found, rest = buffer.partition(b"\r\n")
                if not found:
                    break
                buffer, verb = rest, line[:4].upper()
                reply = {b"EHLO": b"250 tarpit", b"DATA": b"354 go on", b"QUIT": b"221 bye"}.get(verb, b"250 ok")
                in_data = verb == b"DATA"
            time.sleep(TARPIT_SECONDS)
            client.sendall(reply + b"\r\n")


TARPIT_KINDS: list[Callable[[socket.socket], None]] = [late_banner, no_banner, slow_replies]


def healthy_run_seconds(names: list[str]) -> float:
    """Queue PER_DOMAIN messages to each of `names` and wake the worker: seconds until all are delivered."""
    sender = DomainFactory()
    for name in names:
        queue(sender, PER_DOMAIN, to=f"user{{n}}@{name}", past=0)
    started = time.monotonic()
    wake_dispatchers()
    unfinished = Message.objects.filter(domain=sender).exclude(status=Status.DELIVERED)
    wait_until(lambda: not unfinished.exists(), timeout=120, interval=0.1, message="the healthy destinations' mail")
    return time.monotonic() - started


def test_tarpitting_destinations_do_not_delay_the_healthy_ones(zone, settings):
    port = free_port()
    env = FAST_DISPATCH | {
        "EMAIL_URL": "mx://",
        "MAILSERVICE_DNS_RESOLVER": settings.MAILSERVICE_DNS_RESOLVER,
        "MAILSERVICE_MX_PORT": str(port),
        "MAILSERVICE_MX_ALLOW_PRIVATE": "true",
        "MAILSERVICE_SMTP_TIMEOUT": "30",
        "MAILSERVICE_DISPATCH_LEASE_SECONDS": "120",
        "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}",
    }
    healthy = [f"healthy{n}.test" for n in range(2 * HEALTHY)]
    for name in healthy:
        zone.publish_mx(name, f"mx.{name}")
        zone.publish_address(f"mx.{name}", "127.0.0.10")
    tarpits = [f"tarpit{n}.test" for n in range(TARPITS)]
    for n, name in enumerate(tarpits):
        zone.publish_mx(name, f"mx.{name}")
        zone.publish_address(f"mx.{name}", f"127.0.0.{20 + n % len(TARPIT_KINDS)}")
    with (
        smtp_sink(host="127.0.0.10", port=port) as sink,
        socket_server("127.0.0.20", port, late_banner),
        socket_server("127.0.0.21", port, no_banner),
        socket_server("127.0.0.22", port, slow_replies),
        celery_worker(threads=PROCFILE_THREADS, **env) as worker,
    ):
        worker.wait_ready()
        without = healthy_run_seconds(healthy[:HEALTHY])
        tarpit_sender = DomainFactory()
        for name in tarpits:
            queue(tarpit_sender, PER_DOMAIN, to=f"user{{n}}@{name}", past=0)
        wake_dispatchers()
        wait_until(  # the tarpits hold their lanes before the healthy mail comes
            lambda: Message.objects.filter(domain=tarpit_sender, attempts__gt=0).count() >= TARPITS,
            timeout=30,
            message="the tarpits' messages claimed",
        )
        beside = healthy_run_seconds(healthy[HEALTHY:])
        stuck = Message.objects.filter(domain=tarpit_sender).exclude(status=Status.DELIVERED).count()

    print(f"healthy: {without:.1f} s without tarpits, {beside:.1f} s beside them ({stuck} tarpit messages pending)")
    assert len(sink.received) == 2 * HEALTHY * PER_DOMAIN
    assert stuck > 0  # the tarpits did hold their messages meanwhile
    assert beside <= 1.5 * without + 10, f"{beside:.1f} s beside the tarpits, {without:.1f} s without"

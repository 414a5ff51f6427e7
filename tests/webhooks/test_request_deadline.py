"""A receiver that trickles its answer cannot hold the webhooks worker: each request ends at the
deadline, the endpoint's cap holds across lease expiry, and other endpoints are served meanwhile.
Real processes: the worker with beat (the pump) and the webhooks worker on its own queue."""

import contextlib
import socket
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpcore
import pytest

from mailservice.http_deadline import post_status
from messaging.models import EventType, MessageEvent
from tests.factories import DomainFactory, MessageFactory
from tests.harness import BIN, ROOT, celery_worker, child_env, self_signed_certificate, wait_until
from tests.webhooks.receiver import trickling_receiver, webhook_receiver
from webhooks.models import DeliveryStatus, WebhookDelivery
from webhooks.services import endpoint_create
from webhooks.tasks import pump_task

# The production ratios scaled down: a 10 s timeout against a 60 s lease, here 1 s against 3 s.
TIMEOUT, LEASE, CAP = 1.0, 3.0, 2


def _events(domain, count: int) -> None:
    messages = MessageFactory.create_batch(count, domain=domain)
    MessageEvent.objects.bulk_create(MessageEvent(message=m, type=EventType.ACCEPTED) for m in messages)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_trickling_receiver_gets_at_most_its_cap_of_connections_each_closed_at_the_deadline():
    suffix = uuid.uuid4().hex
    env = {
        "CELERY_TASK_DEFAULT_QUEUE": f"test-{suffix}",
        "MAILSERVICE_WEBHOOK_QUEUE": f"webhooks-{suffix}",
        "MAILSERVICE_WEBHOOK_ALLOW_PRIVATE": "true",
        "MAILSERVICE_WEBHOOK_PUMP_INTERVAL": "0.2",
        "MAILSERVICE_WEBHOOK_TIMEOUT": str(TIMEOUT),
        "MAILSERVICE_WEBHOOK_LEASE_SECONDS": str(LEASE),
        "MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY": str(CAP),
    }
    slow_domain, fast_domain = DomainFactory(), DomainFactory()
    with (
        trickling_receiver(interval=0.5) as slow,
        webhook_receiver() as fast,
        celery_worker(**env),
        celery_worker(beat=False, threads=6, queues=env["MAILSERVICE_WEBHOOK_QUEUE"], **env) as webhooks,
    ):
        endpoint_create(domain=slow_domain, url=slow.url, event_types=[])
        endpoint_create(domain=fast_domain, url=fast.url, event_types=[])
        webhooks.wait_ready()
        _events(slow_domain, 12)
        wait_until(lambda: slow.connections, timeout=30, message="the first slow request")

        # Long enough for leases to run out twice: each lease's request was over by then.
        time.sleep(2 * LEASE + 1)
        _events(fast_domain, 6)
        started = time.monotonic()
        fast_delivered = WebhookDelivery.objects.filter(endpoint__domain=fast_domain, status=DeliveryStatus.SUCCEEDED)
        while fast_delivered.count() < 6 and time.monotonic() - started < 10:
            time.sleep(0.1)
        fast_seconds = time.monotonic() - started
        with slow.lock:
            connections, most_open = list(slow.connections), slow.most_open

    finished = [c for c in connections if c.closed is not None]
    held = max(c.closed - c.opened for c in finished) if finished else None
    figures = f"{len(connections)} connections, at most {most_open} at once, the longest held {held} s"
    assert most_open <= CAP, figures
    assert len(connections) >= 2 * CAP, figures  # the slow endpoint was being tried all along
    assert held is not None and held < TIMEOUT + 0.5, figures
    assert all(c.closed_by_client for c in finished), figures
    assert fast_seconds < 2 * TIMEOUT + 2, f"the other endpoint's 6 deliveries took {fast_seconds:.1f} s"


def test_a_request_to_a_trickling_receiver_ends_and_closes_at_the_deadline():
    context = ssl.create_default_context()
    with trickling_receiver(interval=0.2) as slow:
        started = time.monotonic()
        with pytest.raises(httpcore.ReadTimeout):
            post_status(
                url=slow.url,
                headers={"Host": "127.0.0.1"},
                body=b"{}",
                sni_hostname="127.0.0.1",
                ssl_context=context,
                timeout=TIMEOUT,
            )
        elapsed = time.monotonic() - started
        wait_until(lambda: slow.connections[0].closed is not None, timeout=2, message="the receiver to see the close")

    assert TIMEOUT <= elapsed < TIMEOUT + 0.2, elapsed
    assert slow.connections[0].closed_by_client and slow.connections[0].closed - started < TIMEOUT + 0.2


@pytest.mark.live
@pytest.mark.parametrize(("timeout", "lease"), [("60", "60"), ("90", "60"), ("0", "60")])
def test_a_timeout_not_below_the_lease_stops_start_up(timeout, lease):
    env = child_env(MAILSERVICE_WEBHOOK_TIMEOUT=timeout, MAILSERVICE_WEBHOOK_LEASE_SECONDS=lease)
    run = [str(BIN / "python"), "-c", "import config.settings"]
    result = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "MAILSERVICE_WEBHOOK_TIMEOUT must be above 0 and below MAILSERVICE_WEBHOOK_LEASE_SECONDS" in result.stderr


Answer = Callable[[socket.socket, ssl.SSLContext], None]


def _serve_once(listener: socket.socket, answer: Answer, server: ssl.SSLContext) -> None:
    conn, _ = listener.accept()
    with conn:
        answer(conn, server)


def _tls_listener(tmp_path: Path, answer: Answer) -> tuple[int, ssl.SSLContext]:
    """A one-connection server on loopback, given a TLS context for hooks.test; the client context that trusts it."""
    cert, key = self_signed_certificate(tmp_path, host="hooks.test")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_serve_once, args=(listener, answer, server), daemon=True).start()
    return listener.getsockname()[1], ssl.create_default_context(cafile=str(cert))


@pytest.mark.parametrize(("sni_hostname", "status"), [("hooks.test", 204), ("elsewhere.test", None)])
def test_a_request_over_tls_checks_the_configured_name_on_the_checked_address(tmp_path, sni_hostname, status):
    def answer(conn: socket.socket, server: ssl.SSLContext) -> None:
        try:
            with server.wrap_socket(conn, server_side=True) as tls:
                request = chunk = b"-"
                while chunk and not request.endswith(b"\r\n\r\n{}"):  # all of it: closing on unread data resets
                    chunk = tls.recv(65536)
                    request += chunk
                tls.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        except ssl.SSLError:
            pass  # the client refused the certificate

    port, client = _tls_listener(tmp_path, answer)
    request = {
        "url": f"https://127.0.0.1:{port}/hooks",
        "headers": {"Host": f"hooks.test:{port}"},
        "body": b"{}",
        "sni_hostname": sni_hostname,
        "ssl_context": client,
        "timeout": 5.0,
    }
    if status is None:
        with pytest.raises(httpcore.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            post_status(**request)
    else:
        assert post_status(**request) == status


def test_a_trickled_tls_handshake_ends_at_the_deadline(tmp_path):
    def answer(conn: socket.socket, server: ssl.SSLContext) -> None:
        conn.recv(65536)
        conn.sendall(b"\x16\x03\x03\x40\x00")  # a 16 KiB handshake record, then a byte every 0.2 s
        with contextlib.suppress(OSError):
            for _ in range(100):
                time.sleep(0.2)
                conn.sendall(b"\x02")

    port, client = _tls_listener(tmp_path, answer)
    started = time.monotonic()
    with pytest.raises(httpcore.ConnectTimeout):
        post_status(
            url=f"https://127.0.0.1:{port}/hooks",
            headers={"Host": "hooks.test"},
            body=b"{}",
            sni_hostname="hooks.test",
            ssl_context=client,
            timeout=TIMEOUT,
        )
    assert time.monotonic() - started < TIMEOUT + 0.5


@pytest.mark.django_db
def test_a_slow_name_lookup_counts_against_the_deadline_and_no_connection_follows(
    domain, settings, receiver, monkeypatch
):
    settings.MAILSERVICE_WEBHOOK_TIMEOUT = 0.5
    endpoint_create(domain=domain, url=receiver.url.replace("127.0.0.1", "localhost"), event_types=[])
    MessageEvent.objects.create(message=MessageFactory(domain=domain), type=EventType.DELIVERED)
    lookup = socket.getaddrinfo

    def slow_lookup(host: str, *args: Any, **kwargs: Any) -> Any:
        if host == "localhost":
            time.sleep(0.6)  # a resolver waiting on an unanswering name server
        return lookup(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", slow_lookup)
    pump_task()

    delivery = WebhookDelivery.objects.get()
    assert receiver.requests == [] and delivery.last_error.startswith("no answer within 0.5s")

"""A receiver that trickles its answer cannot hold the webhooks worker: each request ends at the
deadline, the endpoint's cap holds across lease expiry, and other endpoints are served meanwhile.
Real processes: the worker with beat (the pump) and the webhooks worker on its own queue."""

import ssl
import subprocess
import time
import uuid

import httpcore
import pytest

from messaging.models import EventType, MessageEvent
from tests.factories import DomainFactory, MessageFactory
from tests.harness import BIN, ROOT, celery_worker, child_env, wait_until
from tests.webhooks.receiver import trickling_receiver, webhook_receiver
from webhooks.models import DeliveryStatus, WebhookDelivery
from webhooks.services import endpoint_create
from webhooks.transport import post_status

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


@pytest.mark.parametrize(("timeout", "lease"), [("60", "60"), ("90", "60"), ("0", "60")])
def test_a_timeout_not_below_the_lease_stops_start_up(timeout, lease):
    env = child_env(MAILSERVICE_WEBHOOK_TIMEOUT=timeout, MAILSERVICE_WEBHOOK_LEASE_SECONDS=lease)
    run = [str(BIN / "python"), "-c", "import config.settings"]
    result = subprocess.run(run, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "MAILSERVICE_WEBHOOK_TIMEOUT must be above 0 and below MAILSERVICE_WEBHOOK_LEASE_SECONDS" in result.stderr

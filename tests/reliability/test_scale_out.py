"""Scale-out on one machine: two web processes and two Celery workers on one PostgreSQL and one Redis.

What several machines need from each other is what these processes share: the rate-limit counters
(in Redis), the queue (Redis) and the claim on each message (PostgreSQL).
"""

import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import httpx
import pytest
from django.core.cache import cache
from django.test import RequestFactory
from django_ratelimit.core import get_usage

from mailservice.ratelimit import client_key
from messaging.models import Message, Status
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import FAST_DISPATCH, CeleryWorker, SmtpSink, celery_worker, smtp_sink, wait_until, web_server

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

DOMAIN = "scale.example.com"


def wait_for_a_fresh_rate_window(rate: str, *, needed: float) -> None:
    """The limiter counts in fixed windows; start where at least `needed` seconds of one are left.

    django-ratelimit's window ends after the whole second `time_left` counts down to (a window with
    0 left still takes counts for up to a second), so the wait runs a second past it."""
    request = RequestFactory().get("/v1/messages", REMOTE_ADDR="127.0.0.1")
    left = get_usage(request, group="api", key=client_key, rate=rate, increment=False)["time_left"]
    if left < needed:
        time.sleep(left + 1.05)


def test_the_per_ip_rate_limit_is_shared_by_every_web_process():
    rate = "120/m"
    with (
        web_server(workers=1, MAILSERVICE_RATE_LIMIT=rate) as a,
        web_server(workers=1, MAILSERVICE_RATE_LIMIT=rate) as b,
    ):
        wait_for_a_fresh_rate_window(rate, needed=20)
        cache.clear()  # the readiness checks of the two servers counted too
        with httpx.Client(timeout=10) as client:
            answers = [client.get(f"{url}/v1/messages") for url in [a, b] * 60]
            over = client.get(f"{b}/v1/messages")
            over_elsewhere = client.get(f"{a}/v1/messages")

    assert Counter(response.status_code for response in answers) == {401: 120}  # counted before authentication
    assert over.status_code == 429
    assert over.json()["error"]["code"] == "RateLimited"
    assert 1 <= int(over.headers["Retry-After"]) <= 60
    assert over_elsewhere.status_code == 429


@dataclass
class Cluster:
    web: str
    headers: dict[str, str]
    sink: SmtpSink
    workers: list[CeleryWorker]

    def burst(self, count: int) -> list[str]:
        body = {"from": f"Shop <shop@{DOMAIN}>", "to": "bob@example.org", "text": "Hello"}
        with httpx.Client(timeout=30) as client:
            responses = [
                client.post(f"{self.web}/v1/send", headers=self.headers, json=body | {"subject": f"n{n}"})
                for n in range(count)
            ]
        assert [response.status_code for response in responses] == [200] * count
        return [response.json()["id"] for response in responses]

    def wait_delivered(self, ids: list[str]) -> None:
        delivered = Message.objects.filter(public_id__in=ids, status=Status.DELIVERED)
        wait_until(lambda: delivered.count() == len(ids), timeout=60, interval=0.2, message=f"{len(ids)} deliveries")


@contextmanager
def cluster(*, threads: int = 0) -> Iterator[Cluster]:
    """Two web processes' worth of sends go through one (the limiter test covers two); two workers, one beat,
    solo or with `threads` batches at once each.

    Batches of two, so a burst is spread over many batches and both workers take some.
    """
    key = ApiKeyFactory(domain=DomainFactory(name=DOMAIN))
    with smtp_sink() as sink, ExitStack() as stack:
        settings = FAST_DISPATCH | {
            "EMAIL_URL": sink.url,
            "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}",
            "MAILSERVICE_DISPATCH_BATCH_SIZE": "2",
        }
        web = stack.enter_context(web_server(workers=2, **settings))
        workers = [
            stack.enter_context(celery_worker(beat=True, threads=threads, **settings)),
            stack.enter_context(celery_worker(beat=False, threads=threads, **settings)),
        ]
        for worker in workers:
            worker.wait_ready()
        yield Cluster(web, {"Authorization": f"Bearer {key.secret}"}, sink, workers)


def messages_recorded_by(worker: CeleryWorker) -> int:
    """What the worker's dispatch batches recorded, its dispatch loop's and its tasks', from its log."""
    log = worker.log_path.read_text()
    by_tasks = re.findall(r"Task messaging\.dispatch\[[^\]]+\] succeeded in [\d.]+s: (\d+)", log)
    by_loop = re.findall(r"dispatch: a woken batch recorded (\d+) messages", log)
    return sum(int(n) for n in [*by_tasks, *by_loop])


@pytest.mark.parametrize("threads", [0, 4], ids=["solo", "4 threads each"])
def test_a_burst_is_dispatched_exactly_once_across_two_workers(threads):
    with cluster(threads=threads) as c:
        ids = c.burst(40)
        c.wait_delivered(ids)
        time.sleep(2)  # past a lease and several sweeps: a second send would show now

    wanted = {f"<{message_id}@{DOMAIN}>" for message_id in ids}
    assert c.sink.message_ids() == Counter({header: 1 for header in wanted})
    shares = [messages_recorded_by(worker) for worker in c.workers]
    assert sum(shares) == 40
    assert all(share > 0 for share in shares), shares


def test_a_worker_killed_mid_burst_loses_nothing():
    with cluster() as c:
        hold = c.sink.behaviour.hold = threading.Event()
        ids = c.burst(20)
        # Both workers are in the middle of a DATA transaction: each has claimed messages.
        wait_until(lambda: c.sink.in_data >= 2, timeout=30, message="both workers to reach DATA")

        c.workers[1].kill()  # the one without beat; the survivor's sweeper finds its leased messages
        c.sink.behaviour.hold = None
        hold.set()
        c.wait_delivered(ids)
        time.sleep(4)  # past the lease (3 s) again: nothing goes out twice

    wanted = {f"<{message_id}@{DOMAIN}>" for message_id in ids}
    assert c.sink.message_ids() == Counter({header: 1 for header in wanted})

"""On PostgreSQL a send wakes the workers' dispatch loops through the database (messaging/outbound/loop.py),
not through a Celery task: the notification comes at commit and only then, and a woken loop sends at once,
without the sweeper, including after it lost its listening connection or started after the send. Lifting
a pause wakes them too."""

import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import httpx
import psycopg
import pytest
import redis
from django.conf import settings
from django.db import connection, connections, transaction

from domains.services import sending_pause, sending_resume
from mailservice.doorbell import CHANNEL
from messaging.models import Message
from messaging.outbound.loop import LISTENER_APPLICATION_NAME
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import FAST_DISPATCH, celery_worker, free_port, redis_server, smtp_sink, wait_until, web_server

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the dispatch loop listens on PostgreSQL"),
]

SEND = {"from": "hello@acme.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}
# The sweeper never runs in these tests (no beat, and its grace is past their end): only the loop sends.
NO_SWEEPER = FAST_DISPATCH | {"MAILSERVICE_DISPATCH_SWEEP_GRACE": "3600"}


@contextmanager
def listening() -> Iterator[psycopg.Connection]:
    """A connection of the test's own listening on the dispatch channel (read it with `received`)."""
    wrapper = connections.create_connection("default")
    wrapper.ensure_connection()
    wrapper.connection.execute(f"LISTEN {CHANNEL}")
    try:
        yield wrapper.connection
    finally:
        wrapper.close()


def received(listener: psycopg.Connection, *, within: float = 1.0) -> int:
    return sum(1 for _ in listener.notifies(timeout=within))


def test_a_stored_send_notifies_once_at_commit(api):
    with listening() as listener:
        with transaction.atomic():
            assert api.post("/v1/send", SEND, format="json").status_code == 200
            assert received(listener, within=0.3) == 0  # not before the commit
        assert received(listener) == 1


def test_a_send_rolled_back_or_refused_notifies_nothing(api, domain):
    with listening() as listener:
        with transaction.atomic():
            assert api.post("/v1/send", SEND, format="json").status_code == 200
            transaction.set_rollback(True)
        sending_pause(domain=domain, actor="ops")
        assert api.post("/v1/send", SEND, format="json").status_code == 503
        assert received(listener) == 0
    assert not Message.objects.exists()


@pytest.mark.parametrize("global_switch", [False, True], ids=["a domain's pause", "the global pause"])
def test_lifting_a_pause_wakes_the_dispatchers_at_commit(domain, global_switch):
    switch = None if global_switch else domain
    sending_pause(domain=switch, actor="ops")
    with listening() as listener:
        with transaction.atomic():
            sending_resume(domain=switch)
            assert received(listener, within=0.3) == 0
        assert received(listener) == 1


def listeners() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
            [LISTENER_APPLICATION_NAME],
        )
        return cursor.fetchone()[0]


@pytest.mark.live
def test_a_send_is_dispatched_by_the_loop_without_a_task_even_when_its_worker_starts_later():
    domain = DomainFactory(name="acme.example.com")
    headers = {"Authorization": f"Bearer {ApiKeyFactory(domain=domain).secret}"}
    queue = f"test-{uuid.uuid4().hex}"
    env = NO_SWEEPER | {"CELERY_TASK_DEFAULT_QUEUE": queue}
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    with smtp_sink() as sink, web_server(workers=1, EMAIL_URL=sink.url, **env) as base_url:
        env["EMAIL_URL"] = sink.url

        def send() -> str:
            response = httpx.post(f"{base_url}/v1/send", headers=headers, json=SEND, timeout=30)
            assert response.status_code == 200, response.text
            return response.json()["id"]

        first = send()
        assert broker.llen(queue) == 0  # no task was queued for it
        with celery_worker(beat=False, threads=2, **env) as worker:
            wait_until(lambda: len(sink.received) == 1, timeout=30, message=f"the drain at start ({worker.log_path})")
            second = send()
            wait_until(lambda: len(sink.received) == 2, timeout=10, message=f"the woken loop ({worker.log_path})")
            assert listeners() == 1
            with connection.cursor() as cursor:  # the loop loses its connection, and listens again
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s",
                    [LISTENER_APPLICATION_NAME],
                )
            wait_until(lambda: listeners() == 1, timeout=10, message="the loop to listen again")
            third = send()
            wait_until(lambda: len(sink.received) == 3, timeout=10, message="the loop after it reconnected")
        assert broker.llen(queue) == 0
    statuses = dict(Message.objects.values_list("public_id", "status"))
    assert statuses == {first: "delivered", second: "delivered", third: "delivered"}


@pytest.mark.live
def test_a_running_worker_still_sends_while_redis_is_down():
    domain = DomainFactory(name="acme.example.com")
    headers = {"Authorization": f"Bearer {ApiKeyFactory(domain=domain).secret}"}
    port = free_port()
    redis_url = f"redis://127.0.0.1:{port}/0"
    env = NO_SWEEPER | {"REDIS_URL": redis_url, "CELERY_BROKER_URL": redis_url}
    with ExitStack() as stack:
        sink = stack.enter_context(smtp_sink())
        base_url = stack.enter_context(web_server(workers=1, EMAIL_URL=sink.url, **env))
        with redis_server(port):  # up while the worker starts, then gone
            worker = stack.enter_context(celery_worker(beat=False, EMAIL_URL=sink.url, **env))
            worker.wait_ready()
        response = httpx.post(f"{base_url}/v1/send", headers=headers, json=SEND, timeout=30)
        assert response.status_code == 200, response.text
        wait_until(lambda: len(sink.received) == 1, timeout=15, message=f"the send ({worker.log_path})")


@pytest.mark.live
def test_only_a_worker_of_the_default_queue_runs_the_loop():
    env = NO_SWEEPER | {"CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}"}
    with celery_worker(beat=False, queues="webhooks", **env) as webhooks, celery_worker(beat=False, **env) as worker:
        webhooks.wait_ready()
        worker.wait_ready()
        wait_until(lambda: listeners() >= 1, timeout=10, message="the default queue's worker to listen")
        assert listeners() == 1
    wait_until(lambda: listeners() == 0, timeout=10, message="the stopped worker's listener to go")

"""The live stack behind PgBouncer in transaction pooling mode (DATABASE_POOLER=pgbouncer): web, two
dispatch workers (one of them sending webhooks), inbound and submission share 3 server connections between many
more client connections, and every message still goes out exactly once, with its webhooks."""

import os
import smtplib
import ssl
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from email.message import EmailMessage
from pathlib import Path

import httpx
import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection

from config.env import database_behind_pooler, database_from_url
from mailservice.locks import single_flight
from messaging.models import Message, Status
from messaging.outbound.dispatch import BatchCounts
from messaging.outbound.loop import POLL_SECONDS, DispatchLoop, listening_database
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import (
    FAST_DISPATCH,
    ROOT,
    PgBouncer,
    PoolWatch,
    celery_worker,
    current_database_url,
    inbound_smtp_server,
    running,
    self_signed_certificate,
    smtp_sink,
    submission_smtp_server,
    wait_until,
    web_server,
)
from tests.inbound.mail import RETURN_PATH_DOMAIN, dsn, verp_address, wire_bytes
from tests.webhooks.receiver import webhook_receiver
from webhooks.services import endpoint_create

pytestmark = pytest.mark.skipif(connection.vendor != "postgresql", reason="PgBouncer pools PostgreSQL")

DOMAIN = "pooled.example.com"
POOL_SIZE = 3
API_SENDS, SMTP_SENDS = 30, 5


def submitted(n: int) -> EmailMessage:
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = f"shop@{DOMAIN}", "bob@example.org", f"smtp {n}"
    mail.set_content("Hello\n")
    return mail


@pytest.mark.parametrize(
    ("pooler", "query", "server_side_cursors", "prepare_threshold"),
    [
        ("none", "", None, "unset"),
        ("pgbouncer", "", True, None),
        ("pgbouncer", "?prepare_threshold=5", True, 5),  # PgBouncer 1.21+ with max_prepared_statements
    ],
)
def test_behind_pgbouncer_server_side_cursors_and_prepared_statements_are_off(
    pooler, query, server_side_cursors, prepare_threshold
):
    database = database_behind_pooler(database_from_url(f"postgres://u@db.example/mail{query}", ROOT), pooler)

    assert database.get("DISABLE_SERVER_SIDE_CURSORS") == server_side_cursors
    assert database["OPTIONS"].get("prepare_threshold", "unset") == prepare_threshold


def test_an_unknown_pooler_is_refused_by_name():
    with pytest.raises(ImproperlyConfigured, match="^DATABASE_POOLER must be none or pgbouncer, got 'pgpool'$"):
        database_behind_pooler(database_from_url("postgres://u@db.example/mail", ROOT), "pgpool")


@pytest.mark.parametrize(
    ("pooler", "direct_url", "listens_to"),
    [
        ("none", None, {}),
        ("pgbouncer", None, None),
        ("pgbouncer", "postgres://postgres@db.example:5432/mail", {"HOST": "db.example", "PORT": "5432"}),
    ],
    ids=["directly", "pooled: polls", "pooled: listens on the direct URL"],
)
def test_the_dispatch_loop_listens_only_on_a_direct_connection(settings, pooler, direct_url, listens_to):
    settings.DATABASE_POOLER = pooler
    settings.DATABASE_LISTEN = database_from_url(direct_url, ROOT) if direct_url else None

    listening = listening_database()

    if listens_to is None or not listens_to:
        assert listening == listens_to
    else:
        assert listening is not None and listens_to.items() <= listening.items()


def test_a_loop_that_cannot_listen_polls():
    batches = threading.Semaphore(0)

    def dispatch() -> BatchCounts:
        batches.release()
        return BatchCounts(claimed=0, recorded=0)

    loop = DispatchLoop(threads=2, dispatch=dispatch, batch_size=2, listen_to=None)
    loop.start()
    try:
        started = time.monotonic()
        assert all(batches.acquire(timeout=3) for _ in range(3))  # at start, then once a poll
        assert time.monotonic() - started >= 2 * POLL_SECONDS * 0.9
    finally:
        loop.stop()


@pytest.mark.django_db
def test_a_single_flight_lock_ends_with_its_section_and_leaves_no_session_lock():
    with single_flight("test.pgbouncer") as first, single_flight("test.pgbouncer") as second:
        assert (first, second) == (True, False)
    with single_flight("test.pgbouncer") as again:
        assert again
    with connection.cursor() as cursor:
        # This database's: a parallel run's other workers hold their own on theirs.
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        assert cursor.fetchone() == (0,)


@pytest.fixture
def pgbouncer_available() -> None:
    if not Path(PgBouncer.BINARY).exists():
        message = f"pgbouncer not found at {PgBouncer.BINARY} (apt-get install pgbouncer)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_live_stack_runs_through_pgbouncer_with_more_clients_than_server_connections(
    tmp_path: Path, pgbouncer_available: None
):
    domain = DomainFactory(name=DOMAIN)
    key = ApiKeyFactory(domain=domain)
    cert, tls_key = self_signed_certificate(tmp_path)
    suffix = uuid.uuid4().hex
    with ExitStack() as stack:
        sink = stack.enter_context(smtp_sink())
        receiver = stack.enter_context(webhook_receiver())
        endpoint_create(domain=domain, url=receiver.url, event_types=[])
        bouncer = stack.enter_context(running(PgBouncer(current_database_url(), pool_size=POOL_SIZE)))
        watch = stack.enter_context(running(PoolWatch(bouncer)))
        env = FAST_DISPATCH | {
            "DATABASE_URL": bouncer.url,
            "DATABASE_POOLER": "pgbouncer",
            "DATABASE_CONN_MAX_AGE": "60",  # each process thread keeps its client connection, as in production
            "EMAIL_URL": sink.url,
            "CELERY_TASK_DEFAULT_QUEUE": f"test-{suffix}",
            "MAILSERVICE_WEBHOOK_QUEUE": f"webhooks-{suffix}",
            "MAILSERVICE_WEBHOOK_ALLOW_PRIVATE": "true",
            "MAILSERVICE_WEBHOOK_PUMP_INTERVAL": "0.3",
            "MAILSERVICE_RETURN_PATH_DOMAIN": RETURN_PATH_DOMAIN,
            "MAILSERVICE_DISPATCH_BATCH_SIZE": "2",
            "MAILSERVICE_TLS_CERT_FILE": str(cert),
            "MAILSERVICE_TLS_KEY_FILE": str(tls_key),
        }
        # One dispatch worker listens straight to PostgreSQL (and sends the webhooks too, fewer processes to
        # start); the other has no direct URL and polls.
        both_queues = f"{env['CELERY_TASK_DEFAULT_QUEUE']},{env['MAILSERVICE_WEBHOOK_QUEUE']}"
        direct = {"DATABASE_DIRECT_URL": current_database_url()}
        workers = [
            stack.enter_context(celery_worker(threads=5, queues=both_queues, **env, **direct)),
            stack.enter_context(celery_worker(beat=False, threads=5, **env)),
        ]
        base_url = stack.enter_context(web_server(workers=1, **env))
        inbound_port = stack.enter_context(inbound_smtp_server(**env))
        submission_port = stack.enter_context(submission_smtp_server(**env))
        for worker in workers:
            worker.wait_ready()

        headers = {"Authorization": f"Bearer {key.secret}"}
        body = {"from": f"shop@{DOMAIN}", "to": "bob@example.org", "text": "Hello"}
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(10) as pool:
            responses = list(
                pool.map(
                    lambda n: client.post(f"{base_url}/v1/send", headers=headers, json=body | {"subject": f"api {n}"}),
                    range(API_SENDS),
                )
            )
        assert [response.status_code for response in responses] == [200] * API_SENDS, responses[0].text
        with smtplib.SMTP("127.0.0.1", submission_port, timeout=30) as smtp:
            smtp.starttls(context=ssl.create_default_context(cafile=str(cert)))
            smtp.login("apikey", key.secret)
            for n in range(SMTP_SENDS):
                smtp.send_message(submitted(n))

        everything = Message.objects.filter(domain=domain)
        wait_until(
            lambda: everything.filter(status=Status.DELIVERED).count() == API_SENDS + SMTP_SENDS,
            timeout=30,
            interval=0.2,
            message=f"{API_SENDS + SMTP_SENDS} deliveries (logs: {[str(w.log_path) for w in workers]})",
        )
        bounced = everything.first()
        assert bounced is not None
        with smtplib.SMTP("127.0.0.1", inbound_port, timeout=10) as smtp:
            smtp.sendmail("", [verp_address(bounced)], wire_bytes(dsn(message=bounced, recipient="bob@example.org")))
        ids = set(everything.values_list("public_id", flat=True))
        wait_until(
            lambda: (
                {e["data"]["id"] for e in receiver.events("email.delivered")} == ids
                and [e["data"]["id"] for e in receiver.events("email.bounced")] == [bounced.public_id]
            ),
            timeout=30,
            interval=0.2,
            message="the delivered and bounced webhooks",
        )

    assert sink.message_ids() == Counter({f"<{public_id}@{DOMAIN}>": 1 for public_id in ids})
    assert Message.objects.get(pk=bounced.pk).status == Status.BOUNCED
    assert watch.servers <= POOL_SIZE
    assert watch.clients > 3 * POOL_SIZE, watch.clients  # many more clients than server connections

"""Real Postfix peers (tests/harness/postfix.py): a Postfix MX on 127.0.0.x for direct delivery, with
STARTTLS and under MTA-STS enforce, and a Postfix relay that throttles with anvil as in production
(450 4.7.1 over its message rate, 421 4.7.0 over its connection count).

Each Postfix passes what it accepts to an aiosmtpd sink of the test, which counts the arrivals."""

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import dkim
import pytest

from messaging.models import EventType, Message, MessageEvent, Status
from messaging.verp import verp_parse
from tests.factories import DomainFactory, dkim_dnsfunc
from tests.harness import FAST_DISPATCH, SmtpSink, celery_worker, free_port, running, smtp_sink, wait_until
from tests.harness.postfix import ClientLimits, PostfixServer
from tests.harness.servers import self_signed_certificate
from tests.messaging.test_delivery_control_live import THREADS, queue
from tests.messaging.test_mx_delivery import dispatched, mx
from tests.messaging.test_mx_tls_policy import authority, outcomes, sts  # noqa: F401 - fixtures

pytestmark = pytest.mark.live


@contextmanager
def postfix(sink: SmtpSink, **options) -> Iterator[PostfixServer]:
    """A private Postfix passing what it accepts to `sink`."""
    with running(PostfixServer(next_hop=f"127.0.0.1:{sink.port}", **options)) as server:
        yield server


def arrivals(sink: SmtpSink, count: int) -> list:
    """Wait until `sink` has `count` messages from Postfix (its queue passes them on within a second)."""
    wait_until(lambda: len(sink.received) >= count, timeout=10, message=f"{count} messages through Postfix")
    return sink.received


@pytest.mark.django_db
def test_direct_delivery_to_a_postfix_mx_is_over_starttls_signed_and_one_return_path_per_recipient(
    zone, receivers, mx_port, settings, tmp_path
):
    """One message to a domain whose MX is Postfix and to one whose MX is an aiosmtpd receiver."""
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.acme.test"
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    mx(zone, "other.test", (10, "mx.other.test", "127.0.0.3"))
    other = receivers("127.0.0.3")
    certificate = self_signed_certificate(tmp_path, host="mx.example.test")

    with (
        smtp_sink() as sink,
        postfix(sink, host="127.0.0.2", port=mx_port, domains=("example.test",), certificate=certificate) as server,
    ):
        message = dispatched("ann@example.test", "carol@other.test", "bob@example.test")
        received = arrivals(sink, 2)

    assert message.status == Status.DELIVERED, message.last_error
    assert [arrival.rcpt_tos for arrival in other.received] == [["carol@other.test"]]
    assert "Anonymous TLS connection established from" in server.log()
    assert sorted(r for arrival in received for r in arrival.rcpt_tos) == ["ann@example.test", "bob@example.test"]
    local_parts = {arrival.mail_from.removesuffix("@bounces.acme.test") for arrival in received}
    proven = {verp_parse(local_part.removeprefix("bounces+")) for local_part in local_parts}
    assert {(verp.public_id, verp.recipient_index, verp.signed) for verp in proven} == {
        (message.public_id.lower(), 0, True),
        (message.public_id.lower(), 2, True),
    }
    for arrival in received:
        assert b"by postfix.test (Postfix) with ESMTPS" in arrival.data.split(b"\r\n\r\n")[0]
        assert dkim.verify(arrival.data, dnsfunc=dkim_dnsfunc(message.domain))


@pytest.mark.django_db
def test_mta_sts_enforce_delivers_to_a_postfix_mx_over_verified_tls(zone, mx_port, authority, sts, outcomes):  # noqa: F811
    """The MX's certificate chain is issued for its name by the test CA that delivery trusts."""
    mx(zone, "secure.test", (10, "mx.secure.test", "127.0.0.2"))
    authority.issue("mx.secure.test")
    certificate = (authority.directory / "mx.secure.test.pem", authority.directory / "mx.secure.test.key")
    sts("secure.test", "enforce", ["mx.secure.test"])

    with (
        smtp_sink() as sink,
        postfix(sink, host="127.0.0.2", port=mx_port, domains=("secure.test",), certificate=certificate) as server,
    ):
        message = dispatched("bob@secure.test")
        [arrival] = arrivals(sink, 1)

    assert message.status == Status.DELIVERED, message.last_error
    assert arrival.rcpt_tos == ["bob@secure.test"]
    assert "TLS connection established from" in server.log()
    assert [(o["policy_type"], o["mx_host"], o["result_type"]) for o in outcomes] == [("sts", "mx.secure.test", "")]


SENDS = 12
LIMITS = ClientLimits(messages=5, connections=2, time_unit=2)  # 2.5 messages/s, 2 connections at once
# Batches of 5, so the worker's threads open more connections than Postfix takes. A lease that outlasts
# the wait for the lowered rate's permits: with FAST_DISPATCH's 3 s, a batch waiting longer loses its
# messages to the sweeper, and the claim it lost keeps the attempt it counted.
RELAY_DISPATCH = {"MAILSERVICE_DISPATCH_BATCH_SIZE": "5", "MAILSERVICE_DISPATCH_LEASE_SECONDS": "30"}


@pytest.mark.django_db(transaction=True)
def test_a_throttling_postfix_relay_costs_no_attempt_and_gets_every_message_once():
    """The production case of issue 30 at small size: Postfix's anvil answers 450 4.7.1 over its message
    rate, and greets with 421 4.7.0 when the worker's four threads open more than its two connections."""
    domain = DomainFactory()
    queue(domain, SENDS, to="user{n}@example.org")
    with smtp_sink() as sink, postfix(sink, host="127.0.0.3", port=free_port(), relay=True, limits=LIMITS) as server:
        env = FAST_DISPATCH | RELAY_DISPATCH | {"EMAIL_URL": f"smtp://{server.host}:{server.port}"}
        with celery_worker(threads=THREADS, CELERY_TASK_DEFAULT_QUEUE=f"test-{uuid.uuid4().hex}", **env) as worker:
            worker.wait_ready()
            started = time.monotonic()
            wait_until(
                lambda: not Message.objects.exclude(status=Status.DELIVERED).exists(),
                timeout=30,
                interval=0.2,
                message="every message delivered",
            )
            took = time.monotonic() - started
            arrivals(sink, SENDS)

    messages = Message.objects.filter(domain=domain)
    assert Counter(messages.values_list("status", flat=True)) == {Status.DELIVERED: SENDS}
    assert set(messages.values_list("attempts", flat=True)) == {1}
    assert len(sink.message_ids()) == SENDS and set(sink.message_ids().values()) == {1}
    put_back = MessageEvent.objects.filter(type=EventType.HELD, detail__contains="no attempt used")
    assert put_back.filter(detail__contains="450 4.7.1 Error: too much mail from 127.0.0.1").exists()
    assert "Message delivery request rate limit exceeded" in server.log()
    # Postfix takes 2.5 messages/s: 12 need 5 s; retries within seconds keep the whole run near that.
    assert took < 20, f"{SENDS} sends took {took:.1f} s"

"""Destinations and shaping: the MX roll-up, the per-destination connection cap and rate, the provider
rule table, and slow-down answers that cost no attempt (direct delivery and relay mode).

Real servers throughout: a DNS server on loopback for the MX records, aiosmtpd receivers on
127.0.0.x sharing MAILSERVICE_MX_PORT (or one as the relay), a raw socket server for a 421 greeting;
the fleet's shared state is the test run's Redis (in-process without it)."""

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.core.cache import cache
from django.utils import timezone

from messaging.models import EventType, Message, Status
from messaging.outbound import fleet_limits
from messaging.outbound.direct import destinations
from messaging.outbound.direct.destinations import destination_list, destination_of, destination_status
from messaging.outbound.direct.sessions import idle_sessions
from messaging.outbound.direct.transport import MxTransport
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.envelope import Envelope, Reply, SendResult
from messaging.outbound.fleet_limits import permit, relay_rate_status
from messaging.outbound.outcomes import FREE_THROTTLES
from messaging.outbound.provider_rules import is_throttle
from tests.dns_server import Zone, dns_server
from tests.factories import MessageFactory
from tests.harness import SmtpSink, busy_greeter, free_port, smtp_sink

pytestmark = pytest.mark.django_db

# Postfix at its connection limit.
RELAY_BUSY = b"421 4.7.0 mail.relay.test Error: too many connections from 127.0.0.1\r\n"


@pytest.fixture(autouse=True)
def _fresh_local_state(monkeypatch, settings):
    monkeypatch.setattr(fleet_limits, "_local", fleet_limits._LocalState())
    monkeypatch.setattr(fleet_limits, "_destinations", {})
    # A slow-down never drops the rate below this: permits stay 10 ms apart, so the tests stay fast.
    settings.MAILSERVICE_RELAY_RATE_FLOOR = 100.0
    settings.MAILSERVICE_SMTP_TIMEOUT = 3.0


@pytest.fixture
def zone(settings) -> Iterator[Zone]:
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        settings.MAILSERVICE_DNS_TIMEOUT = 2.0
        settings.EMAIL_URL = "mx://"
        settings.MAILSERVICE_MX_ALLOW_PRIVATE = True
        settings.MAILSERVICE_MX_PORT = free_port()
        yield zone


@pytest.fixture
def receivers(zone, settings) -> Iterator[Callable[[str], SmtpSink]]:
    with ExitStack() as stack:
        yield lambda host: stack.enter_context(smtp_sink(host=host, port=settings.MAILSERVICE_MX_PORT))


def mx(zone: Zone, domain: str, host: str, address: str) -> None:
    zone.publish_mx(domain, host, 10)
    zone.publish_address(host, address)


def due(*recipients: str) -> Message:
    return MessageFactory(to=list(recipients), next_attempt_at=timezone.now() - timedelta(seconds=1))


def fresh(message: Message) -> Message:
    return Message.objects.get(pk=message.pk)


@contextmanager
def concurrency(*sinks: SmtpSink) -> Iterator[list[int]]:
    """The most SMTP connections open at once over `sinks`, counted by the servers: [peak]."""
    lock, open_now, peak = threading.Lock(), [0], [0]

    def counting(factory):
        def make():
            protocol = factory()
            made, lost = protocol.connection_made, protocol.connection_lost

            def connection_made(transport):
                with lock:
                    open_now[0] += 1
                    peak[0] = max(peak[0], open_now[0])
                made(transport)

            def connection_lost(exc):
                with lock:
                    open_now[0] -= 1
                lost(exc)

            protocol.connection_made, protocol.connection_lost = connection_made, connection_lost
            return protocol

        return make

    for sink in sinks:
        sink.controller.factory = counting(sink.controller.factory)  # type: ignore[method-assign]
    yield peak


# --- the rule table ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "throttle"),
    [
        (Reply(421, "4.7.28 Gmail has detected an unusual rate of mail"), True),
        (Reply(450, "4.2.1 The user you are trying to contact is receiving mail too quickly"), True),
        (Reply(421, "4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred"), True),
        (
            Reply(451, "4.7.650 The mail server has been temporarily rate limited due to IP reputation"),
            True,
        ),
        (Reply(450, "4.7.1 Error: too much mail from 192.0.2.1"), True),
        (Reply(421, "Service not available, closing channel"), True),
        (Reply(452, "4.5.3 Too many recipients"), False),
        (Reply(452, "4.2.2 The email account that you tried to reach is over quota"), False),
        (Reply(451, "4.3.0 Mail server temporarily rejected message"), False),
        (Reply(450, "4.2.0 Greylisted"), False),
        (
            Reply(550, "5.7.26 Unauthenticated email is not accepted due to the domain's DMARC policy"),
            False,
        ),
        (
            Reply(550, "5.7.515 Access denied, sending domain does not meet the required authentication level"),
            False,
        ),
        (Reply(554, "5.7.9 Message not accepted for policy reasons"), False),
        (Reply(550, "5.1.1 The email account that you tried to reach does not exist"), False),
    ],
)
def test_the_rule_table_reads_the_providers_codes(reply, throttle):
    assert is_throttle(reply) == throttle


# --- the MX roll-up ----------------------------------------------------------------------------------


def test_gmail_and_workspace_domains_roll_up_to_one_destination_and_implicit_mx_is_the_domain():
    gmail = destination_of("gmail.com", ["gmail-smtp-in.l.google.com", "alt1.gmail-smtp-in.l.google.com"])
    workspace = destination_of("acme.example", ["aspmx.l.google.com", "alt1.aspmx.l.google.com"])
    assert gmail == workspace == "google.com"
    assert destination_of("tenant.example", ["tenant-example.mail.protection.outlook.com"]) == "outlook.com"
    assert destination_of("plain.example", ["plain.example"]) == "plain.example"
    assert destination_of("mixed.example", ["mx.b.example", "mx.a.example"]) == "a.example,b.example"


# Transactional: the sending threads have connections of their own, whose TLS-RPT counts commit.
@pytest.mark.django_db(transaction=True)
def test_two_domains_of_one_provider_share_its_connection_cap_counted_by_the_receivers(receivers, zone, settings):
    settings.MAILSERVICE_MX_CONNECTIONS = 2
    mx(zone, "one.test", "mx1.provider.test", "127.0.0.2")
    mx(zone, "two.test", "mx2.provider.test", "127.0.0.3")
    first, second = receivers("127.0.0.2"), receivers("127.0.0.3")
    release = threading.Event()
    first.behaviour.hold = second.behaviour.hold = release
    results: list[SendResult] = []

    def send(recipient: str) -> None:
        with MxTransport().connection() as connection:
            envelope = Envelope(mail_from="sender@acme.test", recipients=[recipient], smtputf8=False)
            results.append(connection.send(envelope=envelope, data=b"Subject: hi\r\n\r\nhello\r\n", name="m"))

    with concurrency(first, second) as peak:
        threads = [threading.Thread(target=send, args=(f"u{n}@{('one', 'two')[n % 2]}.test",)) for n in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 5
        while len(results) < 4 and time.monotonic() < deadline:  # the four without a slot give up first
            time.sleep(0.02)
        release.set()
        for thread in threads:
            thread.join(10)

    assert peak == [2]
    refused = [result for result in results if result.not_sent is not None]
    assert len(refused) == 4 and sum(result.delivered for result in results) == 2
    assert all("destination provider.test at its connection cap (2)" in r.not_sent.why for r in refused)
    assert all((r.not_sent.until - timezone.now()).total_seconds() <= 1 and not r.not_sent.throttle for r in refused)
    [listed] = destination_list()
    # The two sessions stay open between batches (messaging/outbound/direct/sessions.py), and so count.
    assert listed["name"] == "provider.test" and listed["connections_open"] in (2, None)
    assert set(listed["mx_hosts"]) <= {"mx1.provider.test", "mx2.provider.test"}
    idle_sessions.close_all()
    assert destination_list()[0]["connections_open"] in (0, None)


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="the details are written to Redis")
def test_a_process_records_a_destinations_details_again_only_after_a_while_or_when_its_hosts_change(
    receivers, zone, monkeypatch
):
    mx(zone, "calm.test", "mx1.calm.test", "127.0.0.2")
    receivers("127.0.0.2")
    receivers("127.0.0.3")

    def recorded_after_a_send() -> list[str]:
        cache.clear()  # what the last batch recorded
        due("a@calm.test")
        dispatch_batch()
        return sorted(destination_status("calm.test")["mx_hosts"])

    assert recorded_after_a_send() == ["mx1.calm.test"]
    assert recorded_after_a_send() == []  # within NOTE_SECONDS: not again

    mx(zone, "calm.test", "mx2.calm.test", "127.0.0.3")
    assert recorded_after_a_send() == ["mx1.calm.test", "mx2.calm.test"]
    for _ in range(5):  # hosts of equal preference, in a new order each batch, are the same hosts
        assert recorded_after_a_send() == []

    monkeypatch.setattr(destinations, "NOTE_SECONDS", 0.0)
    assert recorded_after_a_send() == ["mx1.calm.test", "mx2.calm.test"]


# --- slow-down answers in direct delivery --------------------------------------------------------------


def test_a_provider_throttle_code_slows_only_its_destination_and_uses_no_attempt(receivers, zone, settings):
    settings.MAILSERVICE_RELAY_RATE_FLOOR = 1.0
    # Climbing back slowly enough that a busy machine's pauses before the reading below leave the slow-down in force.
    settings.MAILSERVICE_RELAY_RATE_STEP = 0.01
    mx(zone, "slow.test", "mx.throttling.test", "127.0.0.2")
    mx(zone, "calm.test", "mx.calm.test", "127.0.0.3")
    throttling, calm = receivers("127.0.0.2"), receivers("127.0.0.3")
    throttling.behaviour.data_replies = ["421 4.7.28 Our system has detected an unusual rate of mail"]
    slowed, other = due("a@slow.test"), due("b@calm.test")
    follow_ups: list[int] = []
    for _ in range(30):  # the destination was taking about 100 messages/s: the slow-down halves that
        permit("throttling.test")
    time.sleep(0.3)

    assert dispatch_batch(on_slow_down=lambda: follow_ups.append(1)) == 2

    slowed, other = fresh(slowed), fresh(other)
    assert other.status == Status.DELIVERED and [r.rcpt_tos for r in calm.received] == [["b@calm.test"]]
    assert (slowed.status, slowed.attempts, slowed.lease_expires_at) == (Status.ACCEPTED, 0, None)
    assert (slowed.next_attempt_at - timezone.now()).total_seconds() <= 1.5
    [event] = slowed.events.all()
    assert event.type == EventType.HELD and "no attempt used" in event.detail
    assert "throttling.test asked to slow down: 421 4.7.28" in event.detail
    assert follow_ups == [1]
    throttled = destination_status("throttling.test")
    # Half the rate observed since the first permit: about 50 when the batch starts at once, less (yet above the
    # floor) on a machine that makes it wait.
    assert settings.MAILSERVICE_RELAY_RATE_FLOOR < throttled["effective"] < 60 and "421 4.7.28" in throttled["reason"]
    assert "421 4.7.28" in throttled["last_error"]
    assert destination_status("calm.test")["effective"] is None

    time.sleep(max(0.0, (slowed.next_attempt_at - timezone.now()).total_seconds()))
    dispatch_batch()
    assert fresh(slowed).status == Status.DELIVERED and fresh(slowed).attempts == 1


def test_a_421_greeting_from_every_host_slows_the_destination_without_an_attempt(zone, settings):
    mx(zone, "busy.test", "mx.busy.test", "127.0.0.2")
    message = due("a@busy.test")

    with busy_greeter("127.0.0.2", settings.MAILSERVICE_MX_PORT, RELAY_BUSY):
        dispatch_batch()

    message = fresh(message)
    assert (message.status, message.attempts) == (Status.ACCEPTED, 0)
    assert "busy.test asked to slow down: 421 4.7.0" in message.events.get().detail
    assert "421 4.7.0" in destination_status("busy.test")["last_error"]


def test_an_authentication_refusal_fails_the_recipient_with_what_to_fix(receivers, zone):
    mx(zone, "strict.test", "mx.strict.test", "127.0.0.2")
    receiver = receivers("127.0.0.2")
    text = "5.7.26 Unauthenticated email from acme.test is not accepted due to domain's DMARC policy"
    receiver.behaviour.rejected_rcpts = {"a@strict.test": f"550 {text}"}

    message = due("a@strict.test")
    dispatch_batch()

    message = fresh(message)
    assert message.status == Status.BOUNCED
    details = [event.detail for event in message.events.all()]
    fix = "(reason: authentication — fix the dmarc check: manage.py check_readiness"
    assert any(text in detail and fix in detail for detail in details), details
    assert fix in message.last_error


# --- slow-down answers from a relay -------------------------------------------------------------------


@pytest.fixture
def relay(settings) -> Iterator[SmtpSink]:
    with smtp_sink() as sink:
        settings.EMAIL_URL = sink.url
        yield sink


def test_a_relay_421_at_greeting_uses_no_attempt_and_is_retried_within_seconds(settings):
    port = free_port()
    settings.EMAIL_URL = f"smtp://127.0.0.1:{port}"
    settings.MAILSERVICE_RELAY_RATE = 200.0
    message = due("a@example.org")
    follow_ups: list[int] = []

    with busy_greeter("127.0.0.1", port, RELAY_BUSY) as greeted:
        dispatch_batch(on_slow_down=lambda: follow_ups.append(1))

    message = fresh(message)
    assert greeted == [1] and follow_ups == [1]
    assert (message.status, message.attempts, message.lease_expires_at) == (Status.ACCEPTED, 0, None)
    assert message.next_attempt_at <= timezone.now()
    assert "no attempt used" in message.events.get().detail
    assert "421 4.7.0" in relay_rate_status()["reason"] and relay_rate_status()["effective"] < 200


def test_a_relay_450_4_7_1_lowers_the_rate_and_uses_no_attempt_until_the_free_throttles_run_out(relay, settings):
    settings.MAILSERVICE_RELAY_RATE = 200.0  # halved once (the answers within a second count once): 100/s
    relay.behaviour.rejected_rcpts = {"a@example.org": "450 4.7.1 Error: too much mail from 127.0.0.1"}
    message = due("a@example.org")

    pauses = []  # seconds until each put-back is due again
    for _ in range(FREE_THROTTLES):
        dispatch_batch()
        assert (fresh(message).status, fresh(message).attempts) == (Status.ACCEPTED, 0)
        pauses.append((fresh(message).next_attempt_at - timezone.now()).total_seconds())
        Message.objects.filter(pk=message.pk).update(next_attempt_at=timezone.now())  # the pause is over
    expected = [0, 0.25, 0.5, 1, 2, 4, 5, 5, 5, 5]  # the first at once, then doubling up to 5 s
    assert all(wanted - 0.2 < pause <= wanted for pause, wanted in zip(pauses, expected, strict=True)), pauses
    assert "450 4.7.1" in relay_rate_status()["reason"]
    assert relay_rate_status()["effective"] < 200

    dispatch_batch()  # one slow-down too many in a row: this one counts, with the backoff
    message = fresh(message)
    assert (message.status, message.attempts) == (Status.ACCEPTED, 1)
    assert (message.next_attempt_at - timezone.now()).total_seconds() > 30
    assert f"{FREE_THROTTLES} times in a row" in message.last_error

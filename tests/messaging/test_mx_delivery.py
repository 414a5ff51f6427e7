"""Direct delivery (EMAIL_URL=mx://): each recipient domain's MX hosts, found through a real DNS server
the test publishes records on, are real SMTP servers on loopback addresses (127.0.0.2, …) sharing
MAILSERVICE_MX_PORT. Dispatch runs in-process; the receivers count the connections they accept."""

import socket
import ssl
from collections import Counter
from contextlib import ExitStack
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from messaging.models import EventType, Message, Status, Suppression, SuppressionReason
from messaging.outbound.direct.transport import MxTransport, validate_mx_url
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.envelope import Envelope, SendResult
from messaging.outbound.smtp_client import RelayConfig
from tests.dns_server import Zone, unanswering_dns_server
from tests.factories import MessageFactory
from tests.harness import busy_greeter, self_signed_certificate

pytestmark = pytest.mark.django_db

TOO_BUSY = b"421 4.3.2 too busy, try another host\r\n"


def mx(zone: Zone, domain: str, *hosts: tuple[int, str, str]) -> None:
    """Publish MX records of `domain`: (preference, host name, its address)."""
    for preference, host, address in hosts:
        zone.publish_mx(domain, host, preference)
        zone.publish_address(host, address)


def send(*recipients: str, mail_from: str = "sender@acme.test") -> SendResult:
    with MxTransport().connection() as connection:
        envelope = Envelope(mail_from=mail_from, recipients=list(recipients), smtputf8=False)
        return connection.send(envelope=envelope, data=b"Subject: hi\r\n\r\nhello\r\n", name="m")


def dispatched(*recipients: str) -> Message:
    message = MessageFactory(to=list(recipients), next_attempt_at=timezone.now() - timedelta(seconds=1))
    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    return message


@pytest.mark.parametrize(("ttl", "second_goes_to"), [(300, "127.0.0.2"), (0, "127.0.0.3")])
def test_routing_answers_are_kept_for_their_ttl_across_batches(zone, receivers, ttl, second_goes_to):
    zone.ttl = ttl
    mx(zone, "moved.test", (10, "mx1.moved.test", "127.0.0.2"))
    old, new = receivers("127.0.0.2"), receivers("127.0.0.3")
    assert send("bob@moved.test").delivered

    zone.records[("moved.test", "MX")].clear()
    mx(zone, "moved.test", (10, "mx2.moved.test", "127.0.0.3"))
    assert send("carol@moved.test").delivered

    arrived = {"127.0.0.2": old, "127.0.0.3": new}
    assert [r.rcpt_tos for r in arrived[second_goes_to].received][-1] == ["carol@moved.test"]


@pytest.mark.parametrize("first", ["refuses connections", "greets with 421"])
def test_hosts_are_tried_in_preference_order_and_a_failing_one_passes_to_the_next(zone, receivers, mx_port, first):
    mx(zone, "example.test", (30, "mx3.example.test", "127.0.0.4"), (10, "mx1.example.test", "127.0.0.2"))
    mx(zone, "example.test", (20, "mx2.example.test", "127.0.0.3"))
    second, third = receivers("127.0.0.3"), receivers("127.0.0.4")

    with ExitStack() as stack:
        if first == "greets with 421":
            greeted = stack.enter_context(busy_greeter("127.0.0.2", mx_port, TOO_BUSY))
        result = send("bob@example.test")

    assert result.delivered, result
    if first == "greets with 421":
        assert greeted == [1]
    assert [received.rcpt_tos for received in second.received] == [["bob@example.test"]]
    assert (third.connections, third.received) == (0, [])


def test_hosts_of_equal_preference_share_the_new_sessions(zone, receivers, settings):
    settings.MAILSERVICE_MX_SESSION_IDLE_SECONDS = 0  # no session kept: each batch opens one
    mx(zone, "example.test", (10, "a.example.test", "127.0.0.2"), (10, "b.example.test", "127.0.0.3"))
    first, second = receivers("127.0.0.2"), receivers("127.0.0.3")

    for _ in range(30):  # a batch each: both hosts first 30 times in a row has a chance of 2 in 2^30
        assert send("bob@example.test").delivered

    assert len(first.received) + len(second.received) == 30
    assert first.received and second.received


def test_a_session_kept_to_any_host_of_the_domain_carries_the_next_batches(zone, receivers):
    mx(zone, "example.test", (10, "a.example.test", "127.0.0.2"), (10, "b.example.test", "127.0.0.3"))
    mx(zone, "example.test", (20, "backup.example.test", "127.0.0.4"))
    first, second, backup = receivers("127.0.0.2"), receivers("127.0.0.3"), receivers("127.0.0.4")

    for _ in range(10):  # whichever of a and b each batch lists first
        assert send("bob@example.test").delivered

    assert first.connections + second.connections == 1
    assert len(first.received) + len(second.received) == 10 and backup.connections == 0


def test_a_domain_without_mx_is_its_own_mail_host(zone, receivers):
    zone.publish_address("plain.test", "127.0.0.2")
    receiver = receivers("127.0.0.2")

    assert send("bob@plain.test").delivered
    assert [received.rcpt_tos for received in receiver.received] == [["bob@plain.test"]]


def test_a_null_mx_fails_the_message_at_once_without_a_connection(zone, receivers):
    zone.publish_null_mx("nomail.test")
    zone.publish_address("nomail.test", "127.0.0.2")  # an implicit MX must not be used either
    receiver = receivers("127.0.0.2")

    message = dispatched("bob@nomail.test")

    # `failed`, not `bounced`: no server refused it, the service found it undeliverable.
    assert message.status == Status.FAILED
    assert message.events.get().type == EventType.FAILED
    assert "550 5.1.10" in message.last_error and "null MX" in message.last_error
    assert message.attempts == 1
    assert receiver.connections == 0


def test_a_domain_that_does_not_exist_fails_permanently_a_failing_lookup_defers(zone, receivers):
    zone.failing.add("broken.test")

    missing, broken = dispatched("bob@missing.test"), dispatched("bob@broken.test")

    assert (missing.status, missing.last_error[:9]) == (Status.FAILED, "550 5.1.2")
    assert (broken.status, broken.last_error[:9]) == (Status.ACCEPTED, "451 4.4.3")
    assert broken.next_attempt_at > timezone.now()
    assert broken.events.filter(type=EventType.DEFERRED).count() == 1


def test_a_resolver_that_does_not_answer_defers(settings):
    with unanswering_dns_server() as address:
        settings.EMAIL_URL, settings.MAILSERVICE_DNS_RESOLVER, settings.MAILSERVICE_DNS_TIMEOUT = "mx://", address, 0.3
        result = send("bob@example.test")

    assert result.final.code == 451 and result.final.text.startswith("4.4.3 the MX lookup of example.test failed")


def test_starttls_is_used_when_offered_without_checking_the_certificate(zone, receivers, tmp_path):
    cert, key = self_signed_certificate(tmp_path, host="not-the-mx-name.test")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    mx(zone, "tls.test", (10, "mx.tls.test", "127.0.0.2"))
    mx(zone, "clear.test", (10, "mx.clear.test", "127.0.0.3"))
    offering, plain = receivers("127.0.0.2", tls_context=context), receivers("127.0.0.3")

    assert send("bob@tls.test").delivered
    assert send("bob@clear.test").delivered

    assert [received.tls for received in offering.received] == [True]
    assert [received.tls for received in plain.received] == [False]


def test_a_failed_tls_handshake_falls_back_to_plaintext(zone, receivers, tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_ciphers("NULL")  # with no cipher in common (TLS 1.2 and below) every handshake fails
    context.maximum_version = ssl.TLSVersion.TLSv1_2
    mx(zone, "oldtls.test", (10, "mx.oldtls.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", tls_context=context)

    assert send("bob@oldtls.test").delivered

    assert [received.tls for received in receiver.received] == [False]
    assert receiver.connections == 2  # the handshake that failed, then the session in clear


def test_hosts_that_never_greet_are_given_up_on_after_two_timeouts(zone, settings, mx_port):
    settings.MAILSERVICE_SMTP_TIMEOUT = 0.5
    with ExitStack() as stack:
        for n in range(2, 6):  # listening, never accepting: the connection is made, no banner ever comes
            stack.enter_context(socket.create_server((f"127.0.0.{n}", mx_port)))
            mx(zone, "tarpit.test", (n, f"mx{n}.tarpit.test", f"127.0.0.{n}"))

        result = send("bob@tarpit.test")

    assert result.final.code == 451 and "(2 tried)" in result.final.text
    assert "no further host tried after 1 s" in result.final.text


def test_the_helo_name_is_the_configured_one(zone, receivers, settings):
    settings.MAILSERVICE_HELO_NAME = "out1.mail.acme.test"
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    assert send("bob@example.test").delivered

    assert [received.helo for received in receiver.received] == ["out1.mail.acme.test"]


def test_consecutive_messages_to_one_destination_share_one_connection(zone, receivers):
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    messages = [
        MessageFactory(to=[f"user{n}@example.test"], next_attempt_at=timezone.now() - timedelta(seconds=1))
        for n in range(3)
    ]

    assert dispatch_batch() == 3

    assert len(receiver.received) == 3
    assert receiver.connections == 1
    assert {m.status for m in Message.objects.filter(pk__in=[m.pk for m in messages])} == {Status.DELIVERED}


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("127.0.0.2", "resolves only to loopback, private or link-local addresses"),
        ("10.1.2.3", "resolves only to loopback, private or link-local addresses"),
        ("169.254.0.1", "resolves only to loopback, private or link-local addresses"),
    ],
)
def test_an_mx_on_a_private_address_is_refused_unless_allowed(zone, receivers, settings, target, expected):
    settings.MAILSERVICE_MX_ALLOW_PRIVATE = False
    mx(zone, "inside.test", (10, "mx.inside.test", target))
    receiver = receivers("127.0.0.2")

    result = send("bob@inside.test")

    assert (result.final.code, result.delivered) == (550, False)
    assert expected in result.final.text and "MAILSERVICE_MX_ALLOW_PRIVATE" in result.final.text
    assert receiver.connections == 0


@pytest.mark.parametrize("exchange", ["localhost", "127.0.0.2"])
def test_an_mx_naming_localhost_or_an_ip_address_is_never_used(zone, receivers, exchange):
    zone.publish_mx("odd.test", exchange)
    zone.publish_address("localhost", "127.0.0.2")
    receiver = receivers("127.0.0.2")

    result = send("bob@odd.test")

    assert result.final.code == 550 and exchange in result.final.text
    assert receiver.connections == 0


def test_when_every_host_fails_the_reply_is_temporary_and_names_the_last_error(zone):
    mx(zone, "down.test", (10, "mx1.down.test", "127.0.0.2"), (20, "mx2.down.test", "127.0.0.3"))

    result = send("bob@down.test")

    assert result.final.code == 451 and result.final.text.startswith("4.4.1")
    assert "mx2.down.test [127.0.0.3]" in result.final.text and "(2 tried)" in result.final.text


def test_at_most_five_connections_are_tried_for_a_domain_whatever_dns_publishes(zone, receivers):
    for n in range(1000):  # 1,000 MX records (the answer comes over TCP), none of their hosts answering
        mx(zone, "many.test", (n, f"mx{n}.many.test", f"127.0.{1 + n // 250}.{1 + n % 250}"))
    last = receivers("127.0.4.250")  # the worst preference: never reached

    result = send("bob@many.test")

    assert result.final.code == 451 and "(5 tried)" in result.final.text
    assert last.connections == 0


@pytest.mark.parametrize("return_path_domain", [None, "bounces.acme.test"], ids=["one envelope", "per recipient"])
def test_a_message_to_two_domains_reaches_each_domains_servers_once(zone, receivers, settings, return_path_domain):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = return_path_domain
    mx(zone, "one.test", (10, "mx.one.test", "127.0.0.2"))
    mx(zone, "two.test", (10, "mx.two.test", "127.0.0.3"))
    first, second = receivers("127.0.0.2"), receivers("127.0.0.3")

    message = dispatched("a@one.test", "b@two.test", "c@one.test")

    assert message.status == Status.DELIVERED, message.last_error
    assert Counter(r for received in first.received for r in received.rcpt_tos) == {"a@one.test": 1, "c@one.test": 1}
    assert Counter(r for received in second.received for r in received.rcpt_tos) == {"b@two.test": 1}
    assert (first.connections, second.connections) == (1, 1)


def test_the_delivered_event_names_the_mx_host_that_answered(zone, receivers, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.acme.test"
    mx(zone, "one.test", (10, "mx.one.test", "127.0.0.2"))
    receivers("127.0.0.2")

    message = dispatched("a@one.test")

    delivered = message.events.get(type=EventType.DELIVERED)
    assert (delivered.remote_host, delivered.smtp_code) == ("mx.one.test", 250)


def test_one_domain_failing_refuses_only_its_recipients(zone, receivers):
    mx(zone, "one.test", (10, "mx.one.test", "127.0.0.2"))
    zone.failing.add("broken.test")
    receiver = receivers("127.0.0.2")

    result = send("a@one.test", "b@broken.test")

    assert result.delivered and result.accepted == ["a@one.test"]
    assert str(result.refused["b@broken.test"]).startswith("451 4.4.3")
    assert len(receiver.received) == 1


@pytest.mark.parametrize("url", ["mx://relay.example.com", "mx://?port=2525", "mx:///path"])
def test_anything_after_mx_scheme_stops_start_up(url):
    with pytest.raises(ImproperlyConfigured, match="mx:// takes nothing after the scheme"):
        validate_mx_url(url)


def test_plain_mx_url_is_accepted_and_relay_urls_are_unchanged(settings):
    settings.MAILSERVICE_DNS_RESOLVER = "127.0.0.1:5353"
    validate_mx_url("mx://")
    assert RelayConfig.from_url("smtp://relay.example.com").host == "relay.example.com"


@pytest.mark.parametrize("looping", ["the domain", "its MX host"])
def test_a_cname_loop_defers_with_a_reply_naming_the_failed_lookup(zone, receivers, looping):
    receiver = receivers("127.0.0.2")
    if looping == "the domain":
        zone.publish_cname("loop.test", "loop2.test")
        zone.publish_cname("loop2.test", "loop.test")
        expected = "4.4.3 the MX lookup of loop.test failed"
    else:
        zone.publish_mx("loop.test", "mx.loop.test")
        zone.publish_cname("mx.loop.test", "mx2.loop.test")
        zone.publish_cname("mx2.loop.test", "mx.loop.test")
        expected = "lookup of mx.loop.test failed"

    result = send("bob@loop.test")

    assert result.final.code == 451 and expected in result.final.text
    assert "The CNAME chain is too long" in result.final.text
    assert receiver.connections == 0


def test_an_mx_reached_through_a_cname_chain_is_used(zone, receivers):
    zone.publish_mx("alias.test", "mx.alias.test")
    zone.publish_cname("mx.alias.test", "real.alias.test")
    zone.publish_address("real.alias.test", "127.0.0.2")
    receiver = receivers("127.0.0.2")

    assert send("bob@alias.test").delivered
    assert len(receiver.received) == 1


def test_a_host_with_a_thousand_addresses_gets_at_most_five_connection_attempts(zone, settings):
    settings.MAILSERVICE_SMTP_TIMEOUT = 1.0
    zone.publish_mx("wide.test", "mx.wide.test")
    for n in range(1000):  # an A answer of 16 KB (over TCP), none of its addresses listening
        zone.publish_address("mx.wide.test", f"127.0.{8 + n // 250}.{1 + n % 250}")

    result = send("bob@wide.test")

    assert result.final.code == 451 and "(5 tried)" in result.final.text


@pytest.mark.parametrize("deferral", ["rcpt", "data"])
def test_giving_up_on_a_receiver_that_kept_deferring_is_a_soft_bounce(zone, receivers, settings, deferral):
    """In direct delivery no DSN ever says that a message expired in the queue: the last 4xx of the last
    attempt is a soft bounce of each recipient it left, counted toward the soft-bounce limit (here 1)."""
    settings.MAILSERVICE_DISPATCH_MAX_ATTEMPTS = 1
    settings.MAILSERVICE_SOFT_BOUNCE_LIMIT = 1
    mx(zone, "example.org", (10, "mx.example.org", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    if deferral == "rcpt":
        receiver.behaviour.rejected_rcpts = {"bob@example.org": "452 4.2.2 Mailbox full"}
    else:
        receiver.behaviour.data_reply = "451 4.3.0 Temporary local problem"

    message = dispatched("bob@example.org")

    assert message.status == Status.FAILED
    [soft] = message.events.filter(type=EventType.SOFT_BOUNCED)
    assert (soft.recipient, soft.bounce_type, soft.remote_host) == ("bob@example.org", "soft", "mx.example.org")
    assert soft.smtp_code == (452 if deferral == "rcpt" else 451)
    suppression = Suppression.objects.get(address="bob@example.org")
    assert suppression.reason == SuppressionReason.SOFT_BOUNCE and suppression.expires_at is not None


def test_giving_up_when_no_receiver_answered_is_no_bounce(zone, settings, mx_port):
    settings.MAILSERVICE_DISPATCH_MAX_ATTEMPTS = 1
    mx(zone, "example.org", (10, "mx.example.org", "127.0.0.2"))  # nothing listens there

    message = dispatched("bob@example.org")

    assert message.status == Status.FAILED
    assert not message.events.filter(type=EventType.SOFT_BOUNCED).exists()

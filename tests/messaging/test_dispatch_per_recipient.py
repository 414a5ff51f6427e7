"""Each recipient of a message gets its own SMTP transaction and signed return path, over one connection.

Dispatch runs in-process against a real SMTP server (aiosmtpd on loopback)."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import EventType, Message, Status, SuppressionReason
from messaging.outbound import fleet_limits
from messaging.outbound.dispatch import dispatch_batch
from messaging.suppressions import suppression_add
from messaging.verp import VERP_PREFIX, verp_parse
from tests.factories import MessageFactory

pytestmark = pytest.mark.django_db

RETURN_PATH_DOMAIN = "bounces.acme.example.com"


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = RETURN_PATH_DOMAIN
    return live_sink


def due(*recipients: str, **fields) -> Message:
    return MessageFactory(to=list(recipients), next_attempt_at=timezone.now() - timedelta(seconds=1), **fields)


def proven(mail_from: str) -> tuple[str, int | None]:
    """(public id, recipient index) a return path proves; ('', None) when its tag is wrong."""
    local, _, domain = mail_from.rpartition("@")
    prefix, _, suffix = local.partition("+")
    assert (prefix, domain) == (VERP_PREFIX, RETURN_PATH_DOMAIN)
    verp = verp_parse(suffix)
    return (verp.public_id, verp.recipient_index) if verp.signed else ("", None)


@pytest.mark.parametrize("pipelining", [False, True], ids=["plain", "pipelining"])
def test_two_recipients_get_two_transactions_with_their_own_signed_return_paths_over_one_connection(sink, pipelining):
    sink.behaviour.pipelining = pipelining
    message = due("Bob <bob@example.org>", cc=["carol@example.org"], bcc=["dave@example.net"])

    assert dispatch_batch() == 1

    assert [received.rcpt_tos for received in sink.received] == [
        ["bob@example.org"],
        ["carol@example.org"],
        ["dave@example.net"],
    ]
    assert [proven(received.mail_from) for received in sink.received] == [
        (message.public_id, 0),
        (message.public_id, 1),
        (message.public_id, 2),
    ]
    assert len({received.peer for received in sink.received}) == 1  # one connection
    assert len({received.data for received in sink.received}) == 1  # the same signed message
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert list(message.events.values_list("type", "recipient")) == [(EventType.DELIVERED, "")]


def test_a_suppressed_recipient_keeps_the_others_at_their_own_index(sink, domain):
    suppression_add(domain=domain, address="a@example.org", reason=SuppressionReason.BOUNCE)
    message = due("a@example.org", "b@example.org", domain=domain)

    dispatch_batch()

    [received] = sink.received
    assert (received.rcpt_tos, proven(received.mail_from)) == (["b@example.org"], (message.public_id, 1))


@pytest.mark.parametrize(
    ("refusal", "expected"),
    [
        (
            {"rejected_rcpts": {"a@example.org": "550 5.1.1 No such user"}},
            "550 5.1.1 No such user (reason: user_unknown)",
        ),
        (
            {"data_replies": ["554 5.7.1 Rejected for a@example.org"]},
            "554 5.7.1 Rejected for a@example.org (reason: policy)",
        ),
    ],
    ids=["at-rcpt", "at-data"],
)
def test_a_recipient_refused_in_its_own_transaction_leaves_the_message_delivered_to_the_other(sink, refusal, expected):
    for name, value in refusal.items():
        setattr(sink.behaviour, name, value)
    message = due("a@example.org", "b@example.org")

    dispatch_batch()

    assert [received.rcpt_tos for received in sink.received] == [["b@example.org"]]
    message.refresh_from_db()
    assert (message.status, message.attempts) == (Status.DELIVERED, 1)
    rejected = message.events.get(type=EventType.RECIPIENT_REJECTED)
    assert (rejected.recipient, rejected.detail) == ("a@example.org", expected)


def test_every_recipients_transaction_refused_for_good_bounces_the_message(sink):
    sink.behaviour.data_replies = ["550 5.7.1 Message rejected", "550 5.7.1 Message rejected"]
    message = due("a@example.org", "b@example.org")

    dispatch_batch()

    message.refresh_from_db()
    assert (message.status, message.last_error) == (Status.BOUNCED, "550 5.7.1 Message rejected (reason: policy)")
    assert sink.received == []


def test_a_temporary_failure_of_every_transaction_retries_the_message_and_each_recipient_gets_it_once(sink):
    sink.behaviour.data_replies = ["451 4.3.0 Try again later", "451 4.3.0 Try again later"]
    message = due("a@example.org", "b@example.org")
    dispatch_batch()
    message.refresh_from_db()
    assert (message.status, message.attempts, sink.received) == (Status.ACCEPTED, 1, [])

    Message.objects.filter(pk=message.pk).update(next_attempt_at=timezone.now())
    dispatch_batch()

    message.refresh_from_db()
    assert (message.status, message.attempts) == (Status.DELIVERED, 2)
    assert sorted(received.rcpt_tos[0] for received in sink.received) == ["a@example.org", "b@example.org"]


def test_a_connection_lost_after_one_recipient_got_it_records_the_message_and_never_sends_it_twice(sink):
    class DropAfterTheFirst(list):
        def append(self, received) -> None:
            super().append(received)
            sink.behaviour.drop = True  # the next DATA gets no answer: the connection is cut

    sink.received = DropAfterTheFirst()
    message = due("a@example.org", "b@example.org")

    assert dispatch_batch() == 1

    message.refresh_from_db()
    assert (message.status, message.lease_expires_at) == (Status.DELIVERED, None)
    lost = message.events.get(type=EventType.RECIPIENT_REJECTED)
    assert lost.recipient == "b@example.org" and "not sent, the relay connection failed" in lost.detail
    sink.behaviour.drop = False
    assert dispatch_batch() == 0
    assert [received.rcpt_tos for received in sink.received] == [["a@example.org"]]


def test_each_transaction_takes_a_permit_of_the_relay_rate(sink, settings, monkeypatch):
    monkeypatch.setattr(fleet_limits, "_local", fleet_limits._LocalState())
    settings.MAILSERVICE_RELAY_RATE = 10.0
    due(*(f"r{n}@example.org" for n in range(6)))

    started = time.monotonic()
    dispatch_batch()

    assert len(sink.received) == 6
    assert time.monotonic() - started >= 0.4  # six permits at 10/s: at least four intervals of 100 ms


def test_without_a_return_path_domain_one_transaction_carries_every_recipient(sink, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = None
    message = due("a@example.org", "b@example.org")

    dispatch_batch()

    [received] = sink.received
    assert (received.mail_from, received.rcpt_tos) == (message.from_address, ["a@example.org", "b@example.org"])

"""What the rest of a batch comes to when the relay fails or asks to slow down part-way through it.

Dispatch runs in-process against a real SMTP server (aiosmtpd on loopback); every outcome is written on
both paths (the one statement on PostgreSQL and its ORM twin)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import EventType, Message, Status
from messaging.outbound import fleet_limits
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.fleet_limits import relay_rate_status
from tests.factories import DomainFactory, MessageFactory
from tests.harness import smtp_sink

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sql_path")]


@pytest.fixture
def sink(settings, monkeypatch):
    monkeypatch.setattr(fleet_limits, "_local", fleet_limits._LocalState())
    with smtp_sink() as sink:
        settings.EMAIL_URL = sink.url
        yield sink


def queue(*recipient_lists: list[str]) -> list[Message]:
    """Due messages of one domain, claimed in this order."""
    domain, due = DomainFactory(), timezone.now() - timedelta(seconds=1)
    return [MessageFactory(domain=domain, to=to, next_attempt_at=due) for to in recipient_lists]


def after_the_first_delivery(sink, **behaviour) -> None:
    """Change the sink's behaviour once it has accepted one transaction."""

    class Changing(list):
        def append(self, received) -> None:
            super().append(received)
            for name, value in behaviour.items():
                setattr(sink.behaviour, name, value)

    sink.received = Changing()


def stored(message: Message) -> tuple:
    message.refresh_from_db()
    return message.status, message.attempts, message.lease_expires_at, list(message.events.values_list("type"))


def test_a_connection_cut_mid_batch_charges_the_message_in_flight_and_gives_the_rest_back(sink, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = None
    sent, in_flight, rest = queue(["a@example.org"], ["b@example.org"], ["c@example.org"])
    after_the_first_delivery(sink, drop=True)  # the next DATA gets no answer: the connection is cut

    assert dispatch_batch() == 2

    assert stored(sent) == (Status.DELIVERED, 1, None, [(EventType.DELIVERED,)])
    assert stored(in_flight) == (Status.ACCEPTED, 1, None, [(EventType.DEFERRED,)])
    assert in_flight.next_attempt_at > timezone.now() and "SMTPServerDisconnected" in in_flight.last_error
    assert stored(rest) == (Status.ACCEPTED, 0, None, [])  # released: no attempt used, due again at once
    assert [received.rcpt_tos for received in sink.received] == [["a@example.org"]]


def test_a_slow_down_after_one_recipient_got_the_message_records_it_and_gives_the_batch_back(sink, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.example.com"  # one transaction per recipient
    settings.MAILSERVICE_RELAY_RATE = 100.0  # a rate the slow-down lowers
    message, rest = queue(["a@example.org", "b@example.org"], ["c@example.org"])
    after_the_first_delivery(sink, data_reply="421 4.7.0 Too many messages, closing")
    follow_ups = []

    assert dispatch_batch(on_slow_down=lambda: follow_ups.append(1)) == 1

    assert follow_ups == [1]
    assert stored(message) == (Status.DELIVERED, 1, None, [(EventType.RECIPIENT_REJECTED,), (EventType.DELIVERED,)])
    refused = message.events.get(type=EventType.RECIPIENT_REJECTED)
    assert (refused.recipient, refused.detail) == (
        "b@example.org",
        "421 4.7.0 Too many messages, closing (reason: rate_limited)",
    )
    assert stored(rest) == (Status.ACCEPTED, 0, None, [])
    assert "421 4.7.0" in relay_rate_status()["reason"]
    assert [received.rcpt_tos for received in sink.received] == [["a@example.org"]]

"""The SMTP transport against a real SMTP server (aiosmtpd on loopback), dispatch running in-process."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from messaging.models import Message, Status
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.envelope import Envelope
from messaging.outbound.smtp_client import RelayConfig, SmtpConnection
from tests.factories import MessageFactory
from tests.harness import smtp_sink

pytestmark = pytest.mark.django_db


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    return live_sink


def due_messages(count: int) -> list[Message]:
    return [MessageFactory(next_attempt_at=timezone.now() - timedelta(seconds=1)) for _ in range(count)]


def test_a_batch_goes_over_one_connection_which_the_next_batch_reuses(sink, settings):
    settings.MAILSERVICE_DISPATCH_BATCH_SIZE = 3
    due_messages(3)
    assert dispatch_batch() == 3
    due_messages(1)
    assert dispatch_batch() == 1

    assert len(sink.received) == 4
    assert len({received.peer for received in sink.received}) == 1
    assert set(Message.objects.values_list("status", flat=True)) == {Status.DELIVERED}


def test_requiring_starttls_from_a_relay_without_it_defers_the_message(sink, settings):
    settings.EMAIL_URL = sink.url.replace("smtp://", "smtp+tls://")
    [message] = due_messages(1)

    dispatch_batch()

    message.refresh_from_db()
    assert (message.status, sink.received) == (Status.ACCEPTED, [])
    assert "STARTTLS" in message.last_error


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://relay.example.com", RelayConfig("relay.example.com", 25, "", "", "starttls-optional")),
        (
            "smtp+tls://u%40x:p%2Fw@relay.example.com:587",
            RelayConfig("relay.example.com", 587, "u@x", "p/w", "starttls"),
        ),
        ("smtps://user:secret@relay.example.com", RelayConfig("relay.example.com", 465, "user", "secret", "tls")),
    ],
)
def test_email_url_names_the_relay_credentials_and_tls_mode(url, expected):
    assert RelayConfig.from_url(url) == expected


@pytest.mark.parametrize(
    "url", ["http://relay.example.com", "smtp://", "relay.example.com:25", "smtps://user:hunter2@"]
)
def test_a_malformed_email_url_is_refused_without_echoing_the_password(url):
    with pytest.raises(ImproperlyConfigured, match="EMAIL_URL must be") as caught:
        RelayConfig.from_url(url)
    assert "hunter2" not in str(caught.value)


# --- the SMTP conversation, with and without PIPELINING -------------------------------------------

BODY = b"Subject: hi\r\n\r\n.a line that starts with a dot\r\n.\r\nend\r\n"


@pytest.mark.parametrize(
    ("rejected", "data_replies", "expected"),
    [
        ({}, [], (250, ["a@example.org", "b@example.org"], [])),
        ({"b@example.org": "550 5.1.1 No such user"}, [], (250, ["a@example.org"], ["b@example.org"])),
        (
            {"a@example.org": "550 5.1.1 No", "b@example.org": "452 4.2.2 Full"},
            [],
            (452, [], ["a@example.org", "b@example.org"]),
        ),
        ({}, ["451 4.3.0 Try again later"], (451, ["a@example.org", "b@example.org"], [])),
    ],
    ids=["delivered", "one-refused", "all-refused", "data-deferred"],
)
@pytest.mark.parametrize("pipelining", [False, True], ids=["one-by-one", "pipelined"])
def test_each_reply_is_matched_to_its_command_and_the_connection_stays_in_step(
    pipelining, rejected, data_replies, expected
):
    with smtp_sink() as sink:
        sink.behaviour.pipelining = pipelining
        sink.behaviour.rejected_rcpts = rejected
        sink.behaviour.data_replies = list(data_replies)
        config = RelayConfig.from_url(sink.url)
        connection = SmtpConnection(config, timeout=10)
        envelope = Envelope(
            mail_from="bounce@example.com", recipients=["a@example.org", "b@example.org"], smtputf8=False
        )
        try:
            assert connection.smtp.has_extn("pipelining") == pipelining
            result = connection.send(envelope=envelope, data=BODY, name="first")
            sink.behaviour.rejected_rcpts = {}
            after = connection.send(envelope=envelope, data=BODY, name="second")
        finally:
            connection.close()

    assert (result.final.code, result.accepted, sorted(result.refused)) == expected
    assert (after.final.code, after.accepted) == (250, ["a@example.org", "b@example.org"])
    delivered = 2 if expected[0] == 250 else 1
    assert [received.data for received in sink.received] == [BODY] * delivered  # dots unstuffed as sent


@pytest.mark.parametrize("pipelining", [False, True], ids=["one-by-one", "pipelined"])
def test_a_line_break_in_an_address_is_refused_and_nothing_is_delivered(pipelining):
    with smtp_sink() as sink:
        sink.behaviour.pipelining = pipelining
        connection = SmtpConnection(RelayConfig.from_url(sink.url), timeout=10)
        hostile = Envelope(
            mail_from="a@example.com", recipients=["b@example.org>\r\nrcpt TO:<c@example.org"], smtputf8=False
        )
        try:
            with pytest.raises(ValueError, match="newline"):
                connection.send(envelope=hostile, data=BODY, name="hostile")
        finally:
            connection.close()

    assert sink.received == []

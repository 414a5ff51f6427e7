"""The SMTP transport against a real SMTP server (aiosmtpd on loopback), dispatch running in-process."""

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from messaging.dispatch import dispatch_batch
from messaging.models import Message, Status
from messaging.transports import RelayConfig
from tests.factories import MessageFactory

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

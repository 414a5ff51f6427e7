"""Relay TLS as operators need it: a relay that requires STARTTLS with a self-signed certificate
(stock Debian Postfix) is reached with the documented EMAIL_URL options; bad options stop start-up."""

import ssl
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from messaging.models import Message, Status
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.smtp_client import RelayConfig, SmtpConnection
from tests.factories import MessageFactory
from tests.harness import SmtpSink, free_port, self_signed_certificate

pytestmark = pytest.mark.django_db


@pytest.fixture
def starttls_relay(tmp_path) -> Iterator[tuple[SmtpSink, Path]]:
    """An aiosmtpd relay that refuses mail until STARTTLS, with a self-signed certificate."""
    cert_path, key_path = self_signed_certificate(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    sink = SmtpSink()
    sink.port = free_port()
    sink.controller = Controller(sink, hostname="127.0.0.1", port=sink.port, tls_context=context, require_starttls=True)
    sink.controller.start()
    try:
        yield sink, cert_path
    finally:
        sink.controller.stop()


def _dispatch(settings, url: str) -> Message:
    settings.EMAIL_URL = url
    message = MessageFactory(next_attempt_at=timezone.now() - timedelta(seconds=1))
    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    return message


def test_by_default_a_self_signed_relay_certificate_is_refused(settings, starttls_relay):
    sink, _ = starttls_relay

    message = _dispatch(settings, sink.url)

    assert message.status == Status.ACCEPTED and "CERTIFICATE_VERIFY_FAILED" in message.last_error
    assert sink.received == []


@pytest.mark.parametrize("option", ["ca_file={cert}", "ca_file={cert}&starttls=required", "verify=false"])
def test_the_documented_options_deliver_through_a_self_signed_starttls_relay(settings, starttls_relay, option):
    sink, cert = starttls_relay

    message = _dispatch(settings, f"{sink.url}?{option.format(cert=cert)}")

    assert message.status == Status.DELIVERED, message.last_error
    assert len(sink.received) == 1


def test_relay_connections_share_one_tls_context(starttls_relay):
    sink, cert = starttls_relay
    config = RelayConfig.from_url(f"{sink.url}?ca_file={cert}")

    first, second = SmtpConnection(config, timeout=10), SmtpConnection(config, timeout=10)
    try:
        # Loading the CA store cost each new connection 25 ms of CPU: it is loaded once per process.
        assert first.smtp.sock.context is second.smtp.sock.context
    finally:
        first.close()
        second.close()


def test_starttls_off_never_upgrades(settings, starttls_relay):
    sink, cert = starttls_relay

    message = _dispatch(settings, f"{sink.url}?starttls=off&ca_file={cert}")

    # The relay insists on STARTTLS (530), which the service was told not to use: nothing is sent.
    assert message.status in (Status.BOUNCED, Status.ACCEPTED) and "530" in message.last_error
    assert sink.received == []


def test_the_options_are_read_into_the_relay_config(tmp_path):
    cert, _ = self_signed_certificate(tmp_path)

    config = RelayConfig.from_url(f"smtp://relay.example.com?starttls=off&verify=no&ca_file={cert}")

    assert (config.security, config.verify, config.ca_file) == ("none", False, str(cert))


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("smtp://relay.example.com?verfy=false", "unknown option(s) verfy"),
        ("smtp://relay.example.com?verify=maybe", "verify=maybe is not one of"),
        ("smtp://relay.example.com?starttls=sometimes", "starttls=sometimes is not one of"),
        ("smtps://relay.example.com?starttls=off", "starttls= is only for smtp://"),
        ("smtp://relay.example.com?verify=false&verify=true", "given twice"),
        ("smtp://relay.example.com?ca_file=/nonexistent/ca.pem", "ca_file=/nonexistent/ca.pem cannot be loaded"),
    ],
)
def test_a_bad_option_stops_start_up_with_a_clear_message(url, message):
    with pytest.raises(ImproperlyConfigured, match="EMAIL_URL") as caught:
        RelayConfig.from_url(url)
    assert message in str(caught.value)

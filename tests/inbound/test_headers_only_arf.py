"""Headers-only complaints, as Microsoft's 2026 junk-mail reports are: the body removed, the complainer's
address redacted, sent to a generic address of the return-path domain (`fbl@`). They are attributed by the
signed return path or the Message-ID they quote, never by guessing (messaging/inbound/services.py)."""

import pytest
from django.test import override_settings

from messaging.inbound.services import inbound_deliver
from messaging.models import Direction, EventType, Message, Status, Suppression
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, verp_address

pytestmark = pytest.mark.django_db

FBL = f"fbl@{RETURN_PATH_DOMAIN}"


@pytest.fixture(autouse=True)
def return_path():
    with override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN):
        yield


def sent(domain, *recipients: str) -> Message:
    message = MessageFactory(domain=domain, status=Status.DELIVERED, to=list(recipients))
    message.message_id_header = f"<{message.public_id}@{domain.name}>"
    message.save(update_fields=["message_id_header"])
    return message


def headers_only_arf(*, return_path: str, message_id: str) -> bytes:
    """An ARF whose original is `text/rfc822-headers` only, with the recipient redacted everywhere."""
    quoted = (
        f"Return-Path: <{return_path}>\r\nFrom: shop@acme.example.com\r\nTo: [redacted]\r\n"
        f"Subject: Your order\r\nMessage-ID: {message_id}\r\n"
        "Feedback-ID: inline:prod:acme.example.com:mailservice\r\n"
    )
    return (
        "From: Junk Mail Reporting <staff@hotmail.com>\r\nTo: fbl@bounces.acme.example.com\r\n"
        "Subject: complaint about message\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=feedback-report; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain\r\n\r\nThis is an email abuse report.\r\n"
        "--b\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nUser-Agent: JMRP/2026\r\n"
        "Version: 1\r\nOriginal-Rcpt-To: [redacted]\r\n"
        f"--b\r\nContent-Type: text/rfc822-headers\r\n\r\n{quoted}--b--\r\n"
    ).encode()


def test_the_signed_return_path_it_quotes_names_the_recipient_of_a_message_with_several(domain):
    message = sent(domain, "ann@example.org", "bob@example.org")

    raw = headers_only_arf(return_path=verp_address(message, 1), message_id=message.message_id_header)
    assert inbound_deliver(envelope_from="staff@hotmail.com", recipients=[FBL], raw=raw) == []

    complaint = message.events.get(type=EventType.COMPLAINED)
    assert complaint.recipient == "bob@example.org"
    assert list(Suppression.objects.values_list("address", flat=True)) == ["bob@example.org"]


def test_a_forged_return_path_names_no_one_and_the_message_id_alone_proves_no_recipient_of_several(domain):
    message = sent(domain, "ann@example.org", "bob@example.org")
    forged = f"bounces+{message.public_id}.1.{'0' * 10}@{RETURN_PATH_DOMAIN}"

    raw = headers_only_arf(return_path=forged, message_id=message.message_id_header)
    assert inbound_deliver(envelope_from="staff@hotmail.com", recipients=[FBL], raw=raw) == []

    assert not message.events.filter(type=EventType.COMPLAINED).exists()
    assert not Suppression.objects.exists()
    kept = Message.objects.get(direction=Direction.RECEIVED)
    assert "proves none of them" in kept.events.get().detail


def test_the_message_id_it_quotes_names_the_one_recipient_of_a_message_with_one(domain):
    message = sent(domain, "ann@example.org")

    raw = headers_only_arf(return_path="someone-else@example.net", message_id=message.message_id_header)
    assert inbound_deliver(envelope_from="staff@hotmail.com", recipients=[FBL], raw=raw) == []

    assert message.events.get(type=EventType.COMPLAINED).recipient == "ann@example.org"

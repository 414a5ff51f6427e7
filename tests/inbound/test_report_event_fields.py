"""A report's events carry what its classification found as fields: the enhanced status, the
diagnostic, hard or soft (decided there, once), a complaint's feedback type.

Each report goes through `inbound_deliver`, as the SMTP server hands it over, against a real sent message."""

import pytest
from django.test import override_settings

from messaging.inbound.services import inbound_deliver
from messaging.models import EventType, Message, Status
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, arf, dsn, verp_address, wire_bytes

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def return_path():
    with override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN):
        yield


def sent(domain, recipient: str) -> Message:
    message = MessageFactory(domain=domain, status=Status.DELIVERED, to=[recipient])
    message.message_id_header = f"<{message.public_id}@{domain.name}>"
    message.save(update_fields=["message_id_header"])
    return message


@pytest.mark.parametrize(
    ("action", "status", "event_type", "bounce_type"),
    [
        ("failed", "5.1.1", EventType.BOUNCED, "hard"),
        ("failed", "4.2.2", EventType.SOFT_BOUNCED, "soft"),
        ("delayed", "4.2.2", EventType.DELAYED, ""),
    ],
)
def test_a_dsn_records_its_status_diagnostic_and_bounce_type(domain, action, status, event_type, bounce_type):
    message = sent(domain, "user@example.org")
    raw = wire_bytes(dsn(message=message, recipient="user@example.org", action=action, status=status))

    assert inbound_deliver(envelope_from="", recipients=[verp_address(message)], raw=raw) == []

    event = message.events.get()
    code = "550" if status.startswith("5") else "452"
    diagnostic = f"smtp; {code} {status} <user@example.org>: Recipient address rejected"
    assert (event.type, event.recipient, event.enhanced_status, event.diagnostic, event.bounce_type) == (
        event_type,
        "user@example.org",
        status,
        diagnostic,
        bounce_type,
    )
    assert (event.smtp_code, event.remote_host) == (None, "")


def test_an_arf_complaint_records_its_feedback_type_and_no_bounce_fields(domain):
    message = sent(domain, "user@example.org")
    raw = wire_bytes(arf(message=message, recipient="user@example.org", to=verp_address(message)))

    assert inbound_deliver(envelope_from="", recipients=[verp_address(message)], raw=raw) == []

    event = message.events.get(type=EventType.COMPLAINED)
    assert (event.recipient, event.feedback_type, event.bounce_type, event.enhanced_status) == (
        "user@example.org",
        "abuse",
        "",
        "",
    )

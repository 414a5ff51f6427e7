"""A report changes only a recipient whose delivery it proves; reports that prove nothing are kept, not acted on.

Each test is an attack by someone who really received the domain's mail (so knows its Message-IDs and
their own return path), sent through `inbound_deliver` as the SMTP server hands it over."""

import pytest
from django.test import override_settings

from messaging.inbound.services import inbound_deliver
from messaging.models import Direction, EventType, Message, Status, Suppression
from messaging.safeguards import sending_health
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, arf, dsn, verp_address, wire_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("return_path")]

GENERIC = [f"fbl@{RETURN_PATH_DOMAIN}", f"postmaster@{RETURN_PATH_DOMAIN}"]


@pytest.fixture
def return_path():
    with override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN):
        yield


def sent(domain, *recipients: str) -> Message:
    message = MessageFactory(domain=domain, status=Status.DELIVERED, to=list(recipients))
    message.message_id_header = f"<{message.public_id}@{domain.name}>"
    message.save(update_fields=["message_id_header"])
    return message


def deliver(raw: bytes, to: str) -> None:
    assert inbound_deliver(envelope_from="", recipients=[to], raw=raw) == []


def report(kind: str, message: Message, naming: str, to: str) -> bytes:
    if kind == "dsn":
        return wire_bytes(dsn(message=message, recipient=naming))
    return wire_bytes(arf(message=message, recipient=naming, to=to))


def kept_reports() -> list[tuple[list[str], str]]:
    """(to, event detail) of the reports stored as received mail."""
    return [
        (message.to, message.events.get().detail) for message in Message.objects.filter(direction=Direction.RECEIVED)
    ]


def untouched(message: Message, *addresses: str) -> None:
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert not message.events.filter(recipient__in=addresses).exists()
    assert not Suppression.objects.filter(address__in=addresses).exists()


@pytest.mark.parametrize("to", ["own-return-path", *GENERIC])
def test_three_complaints_from_one_real_recipient_count_once_and_never_pause_the_domain(domain, to, settings):
    # Even were complaints from outside a trusted feedback loop counted (tests/inbound/test_complaint_trust.py).
    settings.MAILSERVICE_COMPLAINTS_UNAUTHENTICATED = "count"
    for n in range(110):
        sent(domain, f"reader{n}@example.org")
    mine = [sent(domain, "attacker@example.org") for _ in range(3)]  # 113 sends in the window

    for message in mine:
        address = verp_address(message, 0) if to == "own-return-path" else to
        deliver(report("arf", message, "attacker@example.org", address), address)

    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused) == (False, False)
    health = sending_health(domain=domain)
    assert (health.sent, health.complained) == (113, 1)


@pytest.mark.parametrize("kind", ["dsn", "arf"])
def test_a_report_at_one_recipients_return_path_naming_a_co_recipient_leaves_the_co_recipient_alone(domain, kind):
    message = sent(domain, "attacker@example.org", "Victim <victim@example.org>")
    own = verp_address(message, 0)

    deliver(report(kind, message, "victim@example.org", own), own)

    untouched(message, "victim@example.org", "attacker@example.org")
    [(to, detail)] = kept_reports()
    assert to == [own] and "report not applied" in detail


@pytest.mark.parametrize("kind", ["dsn", "arf"])
def test_a_report_at_a_recipients_return_path_changes_that_recipient_whatever_address_it_names(domain, kind):
    message = sent(domain, "a@example.org", "b@example.org")
    own = verp_address(message, 1)

    deliver(report(kind, message, "forwarded-to@example.net", own), own)

    event = message.events.get()
    assert event.recipient == "b@example.org"
    assert list(Suppression.objects.values_list("address", flat=True)) == ["b@example.org"]
    assert kept_reports() == []


def test_one_recipients_return_path_tag_does_not_sign_another_index(domain):
    message = sent(domain, "attacker@example.org", "victim@example.org")
    own_tag = verp_address(message, 0).split("@")[0].rpartition(".")[2]
    forged = f"bounces+{message.public_id}.1.{own_tag}@{RETURN_PATH_DOMAIN}"

    deliver(report("dsn", message, "victim@example.org", forged), forged)

    untouched(message, "victim@example.org")


@pytest.mark.parametrize("kind", ["dsn", "arf"])
@pytest.mark.parametrize("to", ["per-message-return-path", *GENERIC])
def test_a_report_proving_only_the_message_is_kept_not_acted_on_for_a_message_with_several_recipients(domain, kind, to):
    message = sent(domain, "attacker@example.org", "victim@example.org")
    address = verp_address(message) if to == "per-message-return-path" else to

    deliver(report(kind, message, "victim@example.org", address), address)

    untouched(message, "victim@example.org", "attacker@example.org")
    [(kept_to, detail)] = kept_reports()
    assert kept_to == [address]
    assert "the message had 2 recipients, so it proves none of them" in detail


@pytest.mark.parametrize("kind", ["dsn", "arf"])
@pytest.mark.parametrize("to", ["per-message-return-path", *GENERIC])
def test_a_report_proving_the_message_is_acted_on_for_a_message_with_one_recipient(domain, kind, to):
    message = sent(domain, "Reader <reader@example.org>")
    address = verp_address(message) if to == "per-message-return-path" else to

    deliver(report(kind, message, "reader@example.org", address), address)

    expected = EventType.BOUNCED if kind == "dsn" else EventType.COMPLAINED
    assert list(message.events.values_list("type", "recipient")) == [(expected, "reader@example.org")]
    assert list(Suppression.objects.values_list("address", flat=True)) == ["reader@example.org"]
    assert kept_reports() == []

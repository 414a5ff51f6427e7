"""Complaints that count (issue 41, item 4), tested as the attack: three people who each really received one
of the domain's messages send a forged ARF complaint to their own return path. Only a complaint from a
trusted feedback loop (an ARF DKIM-signed by a domain in MAILSERVICE_FBL_DOMAINS, verified against the key
the test's DNS server publishes) counts toward the auto-pause; the others are stored, still suppress the
recipient they prove, and are shown as unauthenticated."""

import base64

import dkim
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.test import override_settings

from messaging.inbound.services import inbound_deliver
from messaging.models import EventType, Message, MessageEvent, Status, Suppression
from messaging.safeguards import sending_health
from tests.dns_server import dns_server
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, arf, verp_address, wire_bytes

pytestmark = pytest.mark.django_db

TRUSTED_LOOP = "fbl.provider.test"  # MAILSERVICE_FBL_DOMAINS names provider.test: a subdomain is trusted
ATTACKER = "attacker.test"
SELECTOR = "fbl2026"


def _key_pair() -> tuple[bytes, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return private, base64.b64encode(public).decode()


@pytest.fixture(scope="module")
def keys():
    return {domain: _key_pair() for domain in (TRUSTED_LOOP, ATTACKER)}


@pytest.fixture(scope="module")
def served(keys):
    with dns_server() as (zone, address):
        for domain, (_, public) in keys.items():
            zone.publish_txt(f"{SELECTOR}._domainkey.{domain}", f"v=DKIM1; k=rsa; p={public}")
        yield address


@pytest.fixture(autouse=True)
def configured(served, settings):
    settings.MAILSERVICE_DNS_RESOLVER = served
    settings.MAILSERVICE_DNS_TIMEOUT = 2.0
    settings.MAILSERVICE_FBL_DOMAINS = ["provider.test"]
    settings.MAILSERVICE_FBL_ADDRESSES = []
    with override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN):
        yield


def _window(domain, recipients: list[str]) -> list[Message]:
    """110 delivered sends to others, then one to each of `recipients`: over the safeguard's minimum volume."""
    for n in range(110):
        MessageFactory(domain=domain, status=Status.DELIVERED, to=[f"reader{n}@example.org"])
    return [MessageFactory(domain=domain, status=Status.DELIVERED, to=[recipient]) for recipient in recipients]


def _complaint(message: Message, recipient: str, *, signed_by: str | None, keys) -> bytes:
    raw = wire_bytes(arf(message=message, recipient=recipient, to=verp_address(message, 0)))
    if signed_by is None:
        return raw
    private, _ = keys[signed_by]
    return (
        dkim.sign(raw, SELECTOR.encode(), signed_by.encode(), private, include_headers=[b"from", b"to", b"subject"])
        + raw
    )


def _complain(messages: list[Message], *, signed_by: str | None, keys) -> None:
    for message in messages:
        recipient = message.to[0]
        raw = _complaint(message, recipient, signed_by=signed_by, keys=keys)
        assert inbound_deliver(envelope_from=recipient, recipients=[verp_address(message, 0)], raw=raw) == []


RECIPIENTS = ["ann@example.org", "bob@example.org", "cat@example.org"]


def test_three_forged_complaints_from_three_real_recipients_do_not_pause_the_domain(domain, keys):
    messages = _window(domain, RECIPIENTS)

    _complain(messages, signed_by=None, keys=keys)

    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused) == (False, False)
    assert sending_health(domain=domain).complained == 0
    events = MessageEvent.objects.filter(type=EventType.COMPLAINED)
    assert sorted(event.recipient for event in events) == RECIPIENTS  # stored
    assert {event.complaint_authenticated for event in events} == {False}
    assert all("unauthenticated" in event.detail for event in events)  # shown as such (the console's timeline)
    assert Suppression.objects.filter(address__in=RECIPIENTS).count() == 3  # each still proves its recipient


def test_a_valid_signature_of_an_untrusted_domain_counts_for_nothing(domain, keys):
    messages = _window(domain, RECIPIENTS)

    _complain(messages, signed_by=ATTACKER, keys=keys)

    domain.refresh_from_db()
    assert domain.sending_paused is False
    assert set(
        MessageEvent.objects.filter(type=EventType.COMPLAINED).values_list("complaint_authenticated", flat=True)
    ) == {False}


def test_complaints_signed_by_a_trusted_feedback_loop_count_and_pause_the_domain(domain, keys):
    messages = _window(domain, RECIPIENTS)

    _complain(messages[:1], signed_by=TRUSTED_LOOP, keys=keys)
    event = MessageEvent.objects.get(type=EventType.COMPLAINED)
    assert event.complaint_authenticated is True
    assert f"DKIM-signed by {TRUSTED_LOOP}" in event.detail
    assert sending_health(domain=domain).complained == 1  # it counts

    _complain(messages[1:], signed_by=TRUSTED_LOOP, keys=keys)
    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused) == (True, True)


def test_a_trusted_signature_that_no_longer_verifies_is_unauthenticated(domain, keys):
    (message,) = _window(domain, RECIPIENTS[:1])
    raw = _complaint(message, RECIPIENTS[0], signed_by=TRUSTED_LOOP, keys=keys).replace(
        b"FW: complaint", b"FW: complains", 1
    )

    inbound_deliver(envelope_from=RECIPIENTS[0], recipients=[verp_address(message, 0)], raw=raw)

    assert MessageEvent.objects.get(type=EventType.COMPLAINED).complaint_authenticated is False


def test_unauthenticated_complaints_count_when_the_operator_says_so(domain, keys, settings):
    settings.MAILSERVICE_COMPLAINTS_UNAUTHENTICATED = "count"
    messages = _window(domain, RECIPIENTS)

    _complain(messages, signed_by=None, keys=keys)

    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused) == (True, True)


def test_a_listed_feedback_loop_address_is_trusted_without_a_signature(domain, keys, settings):
    settings.MAILSERVICE_FBL_ADDRESSES = ["fbl@isp.example"]
    (message,) = _window(domain, RECIPIENTS[:1])
    raw = _complaint(message, RECIPIENTS[0], signed_by=None, keys=keys)

    inbound_deliver(envelope_from="FBL@isp.example", recipients=[verp_address(message, 0)], raw=raw)

    assert MessageEvent.objects.get(type=EventType.COMPLAINED).complaint_authenticated is True

"""DKIM signatures as an independent verifier (dkimpy) sees them."""

import dkim
import pytest
from django.utils import timezone

from messaging.models import Message
from messaging.outbound.dkim import dkim_sign, load_private_key, relaxed_body, relaxed_header
from messaging.rfc5322.rendering import render_message
from tests.factories import _shared_dkim_key_pair

PRIVATE_PEM, PUBLIC_KEY = _shared_dkim_key_pair()
PRIVATE_KEY = load_private_key(PRIVATE_PEM)


def dns(name: bytes, timeout: int = 5) -> bytes:
    assert name == b"mail._domainkey.acme.example.com."
    return f"v=DKIM1; k=rsa; p={PUBLIC_KEY}".encode()


def sign(data: bytes) -> bytes:
    return dkim_sign(data=data, domain="acme.example.com", selector="mail", private_key=PRIVATE_KEY)


def rendered(**fields) -> bytes:
    values = {"public_id": "msg_dkim", "from_address": "Shop <shop@acme.example.com>", "to": ["bob@example.org"]}
    values |= {
        "cc": ["Carol <carol@example.org>"],
        "reply_to": [],
        "bcc": [],
        "subject": "Hello",
        "text": "Hi",
        "html": None,
    }
    return render_message(Message(created_at=timezone.now(), **(values | fields))).data


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"text": "trailing   spaces   \n\n\n\n", "html": "<p>  x\t\ty  </p>\n"},
        {"subject": "Ünïcödé and a very long subject " * 8, "text": "é" * 5000},
        {"text": "", "html": None},
        {"to": ["Many <a@example.org>", "b@example.org", "c@example.org"], "reply_to": ["r@example.org"]},
    ],
)
def test_signed_messages_verify_with_dkimpy(fields):
    assert dkim.verify(sign(rendered(**fields)), dnsfunc=dns)


@pytest.mark.parametrize(
    ("original", "tampered"),
    [(b"Subject: Hello", b"Subject: Hellp"), (b"\r\n\r\nHi", b"\r\n\r\nHo"), (b"From: Shop", b"From: Shoq")],
)
def test_a_changed_message_no_longer_verifies(original, tampered):
    signed = sign(rendered())
    assert original in signed
    assert not dkim.verify(signed.replace(original, tampered, 1), dnsfunc=dns)


def test_an_added_second_from_header_breaks_the_signature():
    signed = sign(rendered())
    assert dkim.verify(signed, dnsfunc=dns)
    assert not dkim.verify(b"From: evil@attacker.example\r\n" + signed, dnsfunc=dns)


def test_the_signature_header_names_the_domain_selector_and_relaxed_canonicalization():
    header = sign(rendered()).split(b"\r\n\r\n", 1)[0].decode()
    assert header.startswith("DKIM-Signature: v=1; a=rsa-sha256; c=relaxed/relaxed; d=acme.example.com; s=mail;")
    assert "h=from:to:cc:subject:date:message-id:mime-version:content-type:content-transfer-encoding:from;" in header


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        (b"SUBJect :  two   words \t\r\n", b"subject:two words\r\n"),
        (b"To: a@example.org,\r\n\tb@example.org\r\n", b"to:a@example.org, b@example.org\r\n"),
    ],
)
def test_relaxed_header_canonicalization(raw, canonical):
    assert relaxed_header(raw) == canonical


@pytest.mark.parametrize(
    ("body", "canonical"),
    [(b"a  b \t\r\n\r\n\r\n", b"a b\r\n"), (b"", b""), (b"\r\n\r\n", b""), (b" x", b" x\r\n")],
)
def test_relaxed_body_canonicalization(body, canonical):
    assert relaxed_body(body) == canonical

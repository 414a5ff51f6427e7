"""Every outgoing message carries `Feedback-ID: <template slug or inline>:<key name>:<domain>:<sender id>`
(messaging/feedback_id.py), inside its DKIM signature, whether sent over HTTP with or without a template
or submitted over SMTP; dispatch runs in-process against a real SMTP server on loopback."""

import json
import re
from datetime import UTC, datetime, timedelta

import dkim
import pytest
from django.utils import timezone

from apikeys.models import Permission
from messaging.models import Message
from messaging.outbound.dispatch import dispatch_batch
from messaging.rfc5322.submitted import submitted_wire
from templates_app.services import template_version_publish
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, dkim_dnsfunc

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sql_path")]


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    return live_sink


def _sent_over_http(domain, key_name: str, body: dict) -> Message:
    key = ApiKeyFactory(domain=domain, name=key_name, permissions=(Permission.SEND,))
    response = client_for(key).post("/v1/send", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.json()
    message = Message.objects.get(public_id=response.json()["id"])
    Message.objects.filter(pk=message.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    return message


def _delivered(sink, message: Message) -> bytes:
    dispatch_batch(public_id=message.public_id)
    return next(mail.data for mail in sink.received if f"<{message.public_id}@".encode() in mail.data)


def _feedback_id(data: bytes) -> str:
    found = re.search(rb"^Feedback-ID: ([^\r\n]*)\r\n", data, re.M | re.I)
    assert found is not None
    return found.group(1).decode()


def _signed_headers(data: bytes) -> list[str]:
    signature = re.search(rb"^DKIM-Signature:(.*?)\r\n(?![ \t])", data, re.M | re.S)
    assert signature is not None
    tags = re.search(rb"\bh=([^;]*)", signature.group(1))
    assert tags is not None
    return [name.strip().lower() for name in re.sub(rb"\s", b"", tags.group(1)).decode().split(":")]


def test_a_template_send_carries_its_slug_key_domain_and_sender_id_signed(sink, domain, settings):
    settings.MAILSERVICE_FEEDBACK_SENDER_ID = "acme-esp"
    template_version_publish(
        domain=domain, slug="order-shipped", subject="Shipped", text="On its way", html="<p>On its way</p>"
    )
    body = {"from": "shop@acme.example.com", "to": "bob@example.org", "template": {"id": "order-shipped"}}

    data = _delivered(sink, _sent_over_http(domain, "ops: prod", body))

    # The key's name cannot add a field: its colon and blank become dashes.
    assert _feedback_id(data) == "order-shipped:ops--prod:acme.example.com:acme-esp"
    assert "feedback-id" in _signed_headers(data)
    assert dkim.verify(data, dnsfunc=dkim_dnsfunc(domain))
    forged = data.replace(b"Feedback-ID: order-shipped:", b"Feedback-ID: other-campaign:", 1)
    assert not dkim.verify(forged, dnsfunc=dkim_dnsfunc(domain))


def test_an_inline_send_says_inline(sink, domain):
    body = {"from": "shop@acme.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}

    data = _delivered(sink, _sent_over_http(domain, "", body))

    assert _feedback_id(data) == "inline::acme.example.com:mailservice"
    assert dkim.verify(data, dnsfunc=dkim_dnsfunc(domain))


def test_a_submission_gets_the_services_feedback_id_in_place_of_its_own():
    raw = b"From: a@acme.example.com\r\nFeedback-ID: mine:forged:x:y\r\nSubject: s\r\n\r\nbody\r\n"

    wire = submitted_wire(
        raw,
        message_id="<m@acme.example.com>",
        date=datetime(2026, 1, 2, tzinfo=UTC),
        feedback_id="inline:smtp:acme.example.com:mailservice",
    )

    assert wire.count(b"Feedback-ID:") == 1
    assert b"Feedback-ID: inline:smtp:acme.example.com:mailservice\r\n\r\nbody" in wire

"""Every event's payload is what the OpenAPI document's `webhooks` section says it is."""

import json
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import jsonschema
import pytest
from django.test import Client

from messaging.models import Direction, MessageEvent, Status
from messaging.models import EventType as MessageEventType
from tests.factories import MessageFactory
from webhooks.payloads import PUBLIC_TYPE, event_payload, messages_data

pytestmark = pytest.mark.django_db

# What the writers record for each type (messaging/outbound/dispatch.py, its sandbox, messaging/inbound).
RECORDED = {
    MessageEventType.DELIVERED: {"detail": "250 2.0.0 OK", "smtp_code": 250, "enhanced_status": "2.0.0"},
    MessageEventType.BOUNCED: {
        "detail": "smtp; 550 user unknown",
        "enhanced_status": "5.1.1",
        "diagnostic": "smtp; 550 user unknown",
        "bounce_type": "hard",
        "cause": "mailbox",
    },
    MessageEventType.SOFT_BOUNCED: {"enhanced_status": "4.2.2", "bounce_type": "soft"},
    MessageEventType.RECIPIENT_REJECTED: {
        "detail": "550 5.1.1 no such user",
        "smtp_code": 550,
        "enhanced_status": "5.1.1",
        "diagnostic": "5.1.1 no such user",
        "bounce_type": "hard",
    },
    MessageEventType.DEFERRED: {"detail": "attempt 1: 451 4.3.0 try later", "smtp_code": 451, "cause": "other"},
    MessageEventType.FAILED: {"detail": "attempt 5, giving up: 421 4.7.26 DMARC", "smtp_code": 421}
    | {"cause": "authentication", "fix_check": "dmarc"},
    MessageEventType.COMPLAINED: {"detail": "feedback-type: abuse", "feedback_type": "abuse"},
}


def _received_raw() -> bytes:
    mail = MIMEMultipart("mixed")
    mail["From"], mail["To"], mail["Subject"] = "a@example.org", "help@acme.example.com", "Hi"
    mail.attach(MIMEText("<p>Hi</p>", "html"))
    mail.attach(MIMEApplication(b"\x00\x01", "octet-stream", Name="a.bin"))
    return mail.as_bytes()


@pytest.mark.parametrize("event_type", list(PUBLIC_TYPE))
def test_each_payload_validates_against_its_webhook_schema(event_type):
    document = Client().get("/v1/openapi.json").json()
    if event_type == MessageEventType.RECEIVED:
        message = MessageFactory(direction=Direction.RECEIVED, status=Status.RECEIVED, raw=_received_raw())
    else:
        message = MessageFactory()
    event = MessageEvent.objects.create(
        message=message, type=event_type, recipient="rcpt@example.org", **RECORDED.get(event_type, {})
    )
    public = PUBLIC_TYPE[event_type]

    body = event_payload(
        event=event, message=message, message_data=messages_data([message])[message.pk], event_id="evt_x"
    )

    schema = document["webhooks"][public]["post"]["requestBody"]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**document, **schema}).validate(json.loads(body))

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

DETAILS = {
    MessageEventType.DELIVERED: "250 2.0.0 OK",
    MessageEventType.BOUNCED: "5.1.1 smtp; 550 user unknown",
    MessageEventType.RECIPIENT_REJECTED: "550 5.1.1 no such user",
    MessageEventType.DEFERRED: "attempt 1: 451 4.3.0 try later",
    MessageEventType.COMPLAINED: "feedback-type: abuse",
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
        message=message, type=event_type, recipient="rcpt@example.org", detail=DETAILS.get(event_type, "")
    )
    public = PUBLIC_TYPE[event_type]

    body = event_payload(
        event=event, message=message, message_data=messages_data([message])[message.pk], event_id="evt_x"
    )

    schema = document["webhooks"][public]["post"]["requestBody"]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**document, **schema}).validate(json.loads(body))

"""Every event's payload is what the OpenAPI document's `webhooks` section says it is."""

import json
from datetime import timedelta
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import jsonschema
import pytest
from django.test import Client
from django.utils import timezone

from messaging.models import Direction, DmarcRecord, DmarcReport, MessageEvent, ReportMail, Status
from messaging.models import EventType as MessageEventType
from tests.factories import MessageFactory
from webhooks.models import WebhookDelivery
from webhooks.payloads import PUBLIC_TYPE, event_payload, messages_data
from webhooks.services import endpoint_create, events_fan_out

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

    body = event_payload(event=event, message=message, message_data=messages_data([message])[message.pk])

    schema = document["webhooks"][public]["post"]["requestBody"]["content"]["application/json"]["schema"]
    jsonschema.Draft202012Validator({**document, **schema}).validate(json.loads(body))


def test_a_stored_dmarc_report_is_one_domain_dmarc_report_event_matching_its_schema(domain):
    wanting = endpoint_create(domain=domain, url="http://127.0.0.1:9/a", event_types=["domain.dmarc_report"])
    endpoint_create(domain=domain, url="http://127.0.0.1:9/b", event_types=["email.bounced"])
    ended = timezone.now()
    report = DmarcReport.objects.create(
        domain=domain,
        org_name="google.com",
        report_id="1186874427",
        begin=ended - timedelta(days=1),
        end=ended,
        authenticated=True,
        mail=ReportMail.objects.create(kind="dmarc", outcome="stored", raw=b""),
    )
    for source_ip, count, dkim, spf in [("203.0.113.25", 90, True, True), ("8.8.4.4", 7, False, False)]:
        DmarcRecord.objects.create(report=report, source_ip=source_ip, count=count, dkim_aligned=dkim, spf_aligned=spf)

    assert events_fan_out() == 1
    assert events_fan_out() == 0  # published once

    delivery = WebhookDelivery.objects.get()
    assert (delivery.endpoint_id, delivery.dmarc_report_id) == (wanting.endpoint.pk, report.pk)
    body = json.loads(delivery.payload)
    assert (body["type"], body["data"]["authenticated"]) == ("domain.dmarc_report", True)
    assert {key: body["data"][key] for key in ("messages", "dmarc_pass", "dkim_aligned_pass", "spf_aligned_pass")} == {
        "messages": 97,
        "dmarc_pass": 90,
        "dkim_aligned_pass": 90,
        "spf_aligned_pass": 90,
    }
    document = Client().get("/v1/openapi.json").json()
    schema = document["webhooks"]["domain.dmarc_report"]["post"]["requestBody"]["content"]["application/json"]
    jsonschema.Draft202012Validator({**document, **schema["schema"]}).validate(body)

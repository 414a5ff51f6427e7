"""Dispatch and the sandbox record what an event is about as fields, written with the event: the reply
code, the enhanced status, the reply's text, hard or soft, and the relay that answered.

Dispatch runs in-process against a real SMTP server (aiosmtpd on loopback), on both SQL paths."""

from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import EventType, Message, MessageEvent, Status
from messaging.outbound.dispatch import dispatch_batch
from tests.factories import MessageFactory
from tests.harness import free_port

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sql_path")]


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    return live_sink


def due(*recipients: str, **fields) -> Message:
    return MessageFactory(to=list(recipients), next_attempt_at=timezone.now() - timedelta(seconds=1), **fields)


def recorded(event: MessageEvent) -> tuple:
    return (
        event.type,
        event.recipient,
        event.detail,
        event.smtp_code,
        event.enhanced_status,
        event.diagnostic,
        event.bounce_type,
        event.remote_host,
    )


@pytest.mark.parametrize(
    ("reply", "status", "event"),
    [
        (
            "250 2.0.0 OK: queued as 4F2",
            Status.DELIVERED,
            (EventType.DELIVERED, "", "250 2.0.0 OK: queued as 4F2", 250, "2.0.0", "2.0.0 OK: queued as 4F2", ""),
        ),
        (
            "451 4.3.0 try again later",
            Status.ACCEPTED,
            (EventType.DEFERRED, "", "attempt 1: 451 4.3.0 try again later", 451, "4.3.0", "4.3.0 try again later", ""),
        ),
        (
            "554 5.7.1 rejected by policy",
            Status.BOUNCED,
            (
                EventType.BOUNCED,
                "",
                "554 5.7.1 rejected by policy (reason: policy)",
                554,
                "5.7.1",
                "5.7.1 rejected by policy",
                "hard",
            ),
        ),
        (
            "550 no such user",
            Status.BOUNCED,
            (EventType.BOUNCED, "", "550 no such user (reason: user_unknown)", 550, "", "no such user", "hard"),
        ),
    ],
    ids=["2xx", "4xx", "5xx", "5xx-without-enhanced-status"],
)
def test_the_relay_reply_to_data_is_recorded_as_fields(sink, reply, status, event):
    sink.behaviour.data_replies = [reply]
    message = due("bob@example.org")

    assert dispatch_batch() == 1

    message.refresh_from_db()
    assert message.status == status
    assert [recorded(e) for e in message.events.all()] == [(*event, "127.0.0.1")]


@pytest.mark.parametrize(
    ("refusal", "bounce_type", "reason"),
    [("452 4.2.2 mailbox full", "soft", "mailbox_full"), ("550 5.1.1 user unknown", "hard", "user_unknown")],
)
def test_a_refused_recipient_is_recorded_with_its_reply_and_bounce_type(sink, refusal, bounce_type, reason):
    sink.behaviour.rejected_rcpts = {"carol@example.org": refusal}
    message = due("bob@example.org", "carol@example.org")

    assert dispatch_batch() == 1

    code, text = refusal.split(" ", 1)
    rejected, delivered = message.events.order_by("id")
    assert recorded(rejected) == (
        EventType.RECIPIENT_REJECTED,
        "carol@example.org",
        f"{refusal} (reason: {reason})",
        int(code),
        text.split()[0],
        text,
        bounce_type,
        "127.0.0.1",
    )
    assert (delivered.type, delivered.smtp_code, delivered.bounce_type) == (EventType.DELIVERED, 250, "")


def test_a_connection_failure_records_no_reply(settings):
    settings.EMAIL_URL = f"smtp://127.0.0.1:{free_port()}"
    message = due("bob@example.org")

    dispatch_batch()

    event = message.events.get()
    assert event.type == EventType.DEFERRED and event.detail.startswith("attempt 1: ConnectionRefusedError")
    assert (event.smtp_code, event.enhanced_status, event.diagnostic, event.bounce_type) == (None, "", "", "")


def test_the_sandbox_records_the_fields_a_relay_would_give(settings, tmp_path):
    settings.EMAIL_URL, settings.MAILSERVICE_OUTBOX_DIR = None, tmp_path
    message = due("bounced@simulator.test", "softbounce@simulator.test", "complained@simulator.test", is_test=True)

    assert dispatch_batch() == 1

    fields = [
        (e.type, e.recipient, e.smtp_code, e.enhanced_status, e.bounce_type, e.feedback_type, e.remote_host)
        for e in message.events.order_by("id")
    ]
    assert fields == [
        (EventType.BOUNCED, "bounced@simulator.test", 550, "5.1.1", "hard", "", ""),
        (EventType.SOFT_BOUNCED, "softbounce@simulator.test", 452, "4.2.2", "soft", "", ""),
        (EventType.DELIVERED, "complained@simulator.test", 250, "2.0.0", "", "", ""),
        (EventType.COMPLAINED, "complained@simulator.test", None, "", "", "abuse", ""),
    ]
    assert message.events.get(type=EventType.BOUNCED).diagnostic == (
        "5.1.1 simulated hard bounce: no such mailbox (test key)"
    )

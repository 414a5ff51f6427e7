"""The bounce policy (messaging/bounces.py) for dispatch's refusals: hard or soft, and whether it suppresses,
as the one classifier (messaging/refusals.py) decides for a report of the same reply too. Dispatch runs
in-process against a real SMTP server (aiosmtpd on loopback) that refuses, on both SQL paths; Postfix
refusing at RCPT is tests/messaging/test_refusals_suppress.py."""

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.models import Domain
from messaging.models import BounceType, EventType, Message, Suppression, SuppressionReason
from messaging.outbound.dispatch import dispatch_batch
from messaging.refusals import classify_refusal
from tests.factories import MessageFactory

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sql_path")]


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    return live_sink


def sent(domain: Domain, *recipients: str) -> Message:
    message = MessageFactory(domain=domain, to=list(recipients), next_attempt_at=timezone.now() - timedelta(seconds=1))
    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    return message


@pytest.mark.parametrize(
    ("reply", "kind", "suppressed"),
    [
        ("550 5.1.1 <bob@example.org>: Recipient address rejected: User unknown", BounceType.HARD, True),
        ("550 Requested action not taken: mailbox unavailable", BounceType.HARD, True),
        ("554 5.0.0 Rejected", BounceType.HARD, False),  # nothing says the address is the problem
        ("552 4.2.2 Mailbox full", BounceType.SOFT, False),
        ("550 5.7.1 Sender blocked: requires confirmation, see whitelist", BounceType.HARD, False),
        ("554 5.7.1 Service unavailable; client host blocked using zen.spamhaus.org", BounceType.HARD, False),
        ("550 5.7.26 Unauthenticated email is not accepted from this domain", BounceType.HARD, False),
        ("550 5.7.1 likely unsolicited mail", BounceType.HARD, False),
    ],
)
def test_the_policy_suppresses_for_the_address_never_for_the_sender(reply, kind, suppressed):
    code, text = int(reply[:3]), reply[4:]
    status = text.split()[0] if text[:1].isdigit() else ""
    verdict = classify_refusal(code, status, text)
    assert verdict.bounce_type == kind
    assert verdict.suppresses is suppressed


def test_a_refusal_to_data_suppresses_the_recipients_of_its_transaction(sink, domain):
    sink.behaviour.data_replies = ["550 5.1.1 <bob@example.org>: user unknown"]
    message = sent(domain, "bob@example.org")

    assert message.status == "bounced"
    entry = Suppression.objects.get(domain=domain)
    assert (entry.address, entry.reason, entry.detail, entry.source_message_id, entry.expires_at) == (
        "bob@example.org",
        SuppressionReason.BOUNCE,
        "550 5.1.1 <bob@example.org>: user unknown",
        message.pk,
        None,
    )
    assert [e.type for e in message.events.order_by("id")] == [EventType.BOUNCED]  # one event, as before


def test_soft_refusals_count_toward_the_soft_bounce_limit_with_reported_ones(sink, domain, settings):
    settings.MAILSERVICE_SOFT_BOUNCE_LIMIT = 2
    sink.behaviour.rejected_rcpts = {"full@example.org": "550 4.2.2 Mailbox full"}

    first = sent(domain, "full@example.org", "bob@example.org")
    assert not Suppression.objects.exists()
    event = first.events.get(type=EventType.SOFT_BOUNCED)
    assert (event.recipient, event.bounce_type, event.smtp_code) == ("full@example.org", "soft", 550)

    sent(domain, "full@example.org", "bob@example.org")
    entry = Suppression.objects.get(domain=domain)
    assert (entry.address, entry.reason) == ("full@example.org", SuppressionReason.SOFT_BOUNCE)
    assert entry.detail == "2 soft bounces; last: 550 4.2.2 Mailbox full"
    assert entry.expires_at is not None


def test_a_refusal_for_the_sender_is_a_hard_bounce_that_suppresses_no_one(sink, domain):
    sink.behaviour.rejected_rcpts = {"carol@example.org": "550 5.7.1 Sender blocked: requires confirmation"}

    message = sent(domain, "carol@example.org", "bob@example.org")

    event = message.events.get(type=EventType.RECIPIENT_REJECTED)
    assert (event.recipient, event.bounce_type, event.reason) == ("carol@example.org", "hard", "blocked")
    assert not Suppression.objects.exists()
    assert message.status == "delivered"

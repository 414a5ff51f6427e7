"""Refusals explained: a receiver's reply gives its event a `reason`, the compatibility `cause` derived from
it (and, for an authentication refusal, the readiness check to fix), in dispatch's events and in the
reports that come back later, and the webhook payload carries them. The classifier is
messaging/refusals.py; its sources are cited there, its reason table is tests/messaging/test_refusal_classifier.py."""

import json
import time
from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from messaging.inbound.services import inbound_deliver
from messaging.models import EventType, Message, MessageEvent, Status
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.outcomes import THROTTLE_MARK
from messaging.refusals import classify_refusal
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, dsn, verp_address, wire_bytes
from webhooks.payloads import PUBLIC_TYPE, event_payload, messages_data

AUTH, REPUTATION, RATE, POLICY, MAILBOX, OTHER = (
    "authentication",
    "reputation",
    "rate_limited",
    "policy",
    "mailbox",
    "other",
)

# (code, enhanced status, the reply's text as receivers send it) -> (cause, check to fix)
REPLIES = [
    # Gmail (support.google.com/a/answer/3726730)
    (
        550,
        "5.7.26",
        "5.7.26 Unauthenticated email from example.com is not accepted due to domain's DMARC policy. "
        "Please contact the administrator of example.com domain if this was a legitimate mail.",
        (AUTH, "dmarc"),
    ),
    (
        421,
        "4.7.26",
        "4.7.26 This mail has been rate limited because it is unauthenticated. Gmail requires all senders "
        "to authenticate with either SPF or DKIM.",
        (AUTH, "dmarc"),
    ),
    (550, "5.7.27", "5.7.27 This mail has been blocked because the sender does not pass SPF.", (AUTH, "spf")),
    (
        451,
        "4.7.24",
        "4.7.24 The SPF record of the sending domain has one or more suspicious entries. To protect our "
        "users from spam, mail sent from your IP address has been temporarily rate limited.",
        (AUTH, "spf"),
    ),
    (550, "5.7.30", "5.7.30 Your email has been blocked because DKIM authentication didn't pass.", (AUTH, "dkim")),
    (
        550,
        "5.7.32",
        "5.7.32 The From: header isn't aligned with either the authenticated SPF or DKIM organizational domain.",
        (AUTH, "alignment"),
    ),
    (
        550,
        "5.7.25",
        "5.7.25 The IP address sending this message does not have a PTR record setup, or the corresponding "
        "forward DNS entry does not point to the sending IP.",
        (AUTH, "ptr"),
    ),
    (
        421,
        "4.7.28",
        "4.7.28 Gmail has detected an unusual rate of unsolicited mail originating from your DKIM domain. "
        "To protect our users from spam, mail sent from your domain has been temporarily rate limited.",
        (RATE, ""),
    ),
    (
        421,
        "4.7.0",
        "4.7.0 Our system has detected an unusual rate of unsolicited mail originating from your IP address. "
        "To protect our users from spam, mail sent from your IP address has been temporarily blocked.",
        (REPUTATION, ""),  # reason blocked (for a while: a 4.x.x)
    ),
    (
        550,
        "5.7.28",
        "5.7.28 Gmail has detected an unusual rate of unsolicited mail originating from your IP address. "
        "To protect our users from spam, mail sent from your IP address has been blocked.",
        (REPUTATION, ""),
    ),
    (
        550,
        "5.7.1",
        "5.7.1 Our system has detected that this message is likely unsolicited mail. To reduce the amount "
        "of spam sent to Gmail, this message has been blocked.",
        (REPUTATION, ""),
    ),
    (
        550,
        "5.7.1",
        "5.7.1 [192.0.2.1] Our system has detected that this message is likely suspicious due to the very "
        "low reputation of the sending IP address.",
        (REPUTATION, ""),
    ),
    (
        450,
        "4.2.1",
        "4.2.1 The user you are trying to contact is receiving mail too quickly. Please resend your message "
        "at a later time.",
        (RATE, ""),
    ),
    (452, "4.2.2", "4.2.2 The email account that you tried to reach is over quota.", (MAILBOX, "")),
    (550, "5.1.1", "5.1.1 The email account that you tried to reach does not exist.", (MAILBOX, "")),
    (421, "4.7.0", "4.7.0 TLS required for RCPT domain, closing connection.", (POLICY, "")),
    # Microsoft (learn.microsoft.com: NDRs in Exchange Online; Outlook.com error codes)
    (
        550,
        "5.7.515",
        "5.7.515 Access denied, sending domain example.com doesn't meet the required authentication level.",
        (AUTH, "dmarc"),
    ),
    (
        550,
        "5.7.509",
        "5.7.509 Access denied, sending domain example.com does not pass DMARC verification and has a DMARC "
        "policy of reject.",
        (AUTH, "dmarc"),
    ),
    (
        550,
        "5.7.606",
        "5.7.606 Access denied, banned sending IP [192.0.2.1]. To request removal from this list please "
        "visit https://sender.office.com/ and follow the directions.",
        (REPUTATION, ""),
    ),
    (
        451,
        "4.7.650",
        "4.7.650 The mail server [192.0.2.1] has been temporarily rate limited due to IP reputation.",
        (REPUTATION, ""),
    ),
    (451, "4.7.500", "4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)", (RATE, "")),
    (
        550,
        "5.7.1",
        "5.7.1 Unfortunately, messages from [192.0.2.1] weren't sent. Please contact your Internet service "
        "provider since part of their network is on our block list (S3150).",
        (REPUTATION, ""),
    ),
    (
        550,
        "",
        "SC-001 (BAY004-MC1F37) Unfortunately, messages from 192.0.2.1 weren't sent. Please contact your "
        "Internet service provider since part of their network is on our block list.",
        (REPUTATION, ""),
    ),
    # Yahoo (senders.yahooinc.com/smtp-error-codes)
    (
        421,
        "4.7.0",
        "4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume or user "
        "complaints - 4.16.55.1",
        (RATE, ""),
    ),
    (
        421,
        "4.7.1",
        "4.7.1 [TS03] All messages from 192.0.2.1 will be permanently deferred; Retrying will NOT succeed.",
        (RATE, ""),
    ),
    (554, "5.7.9", "5.7.9 Message not accepted for policy reasons.", (AUTH, "dmarc")),
    (
        553,
        "5.7.1",
        "5.7.1 [BL21] Connections will not be accepted from 192.0.2.1, because the ip is in Spamhaus's list",
        (REPUTATION, ""),
    ),
    # Postfix and other MTAs; RFC 3463's classes
    (
        554,
        "5.7.1",
        "5.7.1 Service unavailable; Client host [192.0.2.1] blocked using zen.spamhaus.org",
        (REPUTATION, ""),
    ),
    (450, "4.7.1", "4.7.1 Error: too much mail from 192.0.2.1", (RATE, "")),
    (450, "4.7.1", "4.7.1 <a@example.org>: Recipient address rejected: Greylisted", (POLICY, "")),
    (550, "5.1.8", "5.1.8 <shop@example.com>: Sender address rejected: Domain not found", (POLICY, "")),
    (550, "", "Requested action not taken: mailbox unavailable", (MAILBOX, "")),
    (451, "4.3.0", "4.3.0 Mail server temporarily rejected message.", (OTHER, "")),
    (554, "", "Transaction failed", (OTHER, "")),
    # What DSNs give: a status without a reply code, or a generic one over a specific diagnostic.
    (None, "5.1.1", "", (MAILBOX, "")),
    (None, "5.0.0", "smtp; 550 5.7.606 Access denied, banned sending IP [192.0.2.1]", (REPUTATION, "")),
    # No failure: no cause.
    (250, "2.0.0", "2.0.0 OK: queued", ("", "")),
    (None, "", "smtp; something happened", ("", "")),
    (None, "9.9.9", "not a status", ("", "")),
]


@pytest.mark.parametrize(("code", "status", "text", "expected"), REPLIES)
def test_real_replies_get_their_cause_and_check(code, status, text, expected):
    verdict = classify_refusal(code, status, text)
    assert (verdict.cause, verdict.check) == expected


def test_a_huge_reply_is_read_in_bounded_time():
    text = "5.7.1 " + "a " * 500_000 + "spamhaus"  # past what is read: only the start counts
    started = time.perf_counter()
    verdict = classify_refusal(550, "5.7.1", text)
    assert (verdict.cause, verdict.check) == (POLICY, "")
    assert time.perf_counter() - started < 0.1


# --- dispatch -------------------------------------------------------------------------------------------


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    return live_sink


def due(recipient: str) -> Message:
    return MessageFactory(to=[recipient], next_attempt_at=timezone.now() - timedelta(seconds=1))


def payload_data(event: MessageEvent) -> dict:
    message = event.message
    body = event_payload(event=event, message=message, message_data=messages_data([message])[message.pk])
    return json.loads(body)["data"]


DMARC_REFUSAL = "550 5.7.26 Unauthenticated email from acme.test is not accepted due to domain's DMARC policy"


@pytest.mark.django_db
@pytest.mark.usefixtures("sql_path")
def test_a_dmarc_refusal_bounces_with_its_cause_and_the_check_to_fix_in_the_detail_and_webhook(sink):
    sink.behaviour.rejected_rcpts = {"bob@example.org": DMARC_REFUSAL}
    message = due("bob@example.org")

    assert dispatch_batch() == 1

    message.refresh_from_db()
    fix = f"(reason: authentication — fix the dmarc check: manage.py check_readiness {message.domain.name})"
    assert message.status == Status.BOUNCED and message.last_error == f"{DMARC_REFUSAL} {fix}"
    # One bounce, naming its recipient: the application hears of it once.
    [bounced] = message.events.all()
    assert (bounced.type, bounced.recipient) == (EventType.BOUNCED, "bob@example.org")
    assert (bounced.cause, bounced.fix_check, bounced.detail) == (AUTH, "dmarc", f"{DMARC_REFUSAL} {fix}")
    data = payload_data(bounced)
    assert (data["cause"], data["fix_check"], data["smtp_response"]) == (AUTH, "dmarc", DMARC_REFUSAL)
    assert data["recipient"] == "bob@example.org"


@pytest.mark.django_db
def test_a_throttle_put_back_says_it_was_rate_limited(sink):
    sink.behaviour.rejected_rcpts = {"bob@example.org": "421 4.7.28 Our system has detected an unusual rate"}
    message = due("bob@example.org")

    dispatch_batch()

    event = message.events.get()
    assert event.type == EventType.HELD and THROTTLE_MARK in event.detail
    assert (event.cause, event.fix_check) == (RATE, "")
    assert event.detail.endswith("(reason: rate_limited)")
    assert event.type not in PUBLIC_TYPE  # the service's own put-back: the console's history, never a webhook


@pytest.mark.django_db
def test_a_delivery_has_no_cause(sink):
    message = due("bob@example.org")

    dispatch_batch()

    event = message.events.get()
    assert (event.type, event.cause, event.fix_check) == (EventType.DELIVERED, "", "")
    assert "cause" not in payload_data(event)


# --- reports that come back later ----------------------------------------------------------------------


@pytest.mark.django_db
@override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN)
@pytest.mark.parametrize(
    ("status", "given_as", "expected", "note"),
    [
        (
            "5.7.515",
            "5.7.515",
            (AUTH, "dmarc"),
            "(reason: authentication — fix the dmarc check: manage.py check_readiness",
        ),
        ("5.7.606", "5.0.0", (REPUTATION, ""), "(reason: blocked)"),
        ("4.7.28", "4.7.28", (RATE, ""), "(reason: rate_limited)"),
    ],
    ids=["microsoft-authentication", "generic-status-over-a-specific-diagnostic", "delay"],
)
def test_a_dsn_gets_the_cause_of_the_reply_it_quotes(domain, status, given_as, expected, note):
    message = MessageFactory(domain=domain, status=Status.DELIVERED, to=["user@example.org"])
    action = "delayed" if status.startswith("4") else "failed"
    raw = wire_bytes(dsn(message=message, recipient="user@example.org", action=action, status=status))
    raw = raw.replace(f"Status: {status}".encode(), f"Status: {given_as}".encode())

    assert inbound_deliver(envelope_from="", recipients=[verp_address(message)], raw=raw) == []

    event = message.events.get()
    assert (event.cause, event.fix_check) == expected
    assert note in event.detail and event.detail.startswith("smtp; ")
    data = payload_data(event)
    assert (data["cause"], data.get("fix_check", "")) == expected

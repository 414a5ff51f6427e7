"""The one classifier (messaging/refusals.py): each reason from at least two sources (an RFC's example, a
provider's published reply, a real MTA's wording), hard or soft, and whether it suppresses; then the same
refusal at RCPT (dispatch against a real SMTP peer on loopback) and quoted in a DSN (inbound) gets the
same verdict, one test per reason."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from messaging.inbound.services import inbound_deliver
from messaging.models import EventType, Message, MessageEvent, RefusalReason, Status, Suppression
from messaging.outbound.dispatch import dispatch_batch
from messaging.refusals import SENDER_REASONS, SUPPRESSING, Speaker, classify_refusal
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, verp_address

R = RefusalReason

# (source, code, enhanced status, text) -> reason. Texts as the sources publish them, addresses made up.
TABLE = [
    # user_unknown
    ("gmail", 550, "5.1.1", "5.1.1 The email account that you tried to reach does not exist.", R.USER_UNKNOWN),
    ("icloud", 550, "5.1.1", "5.1.1 <someone@icloud.com>: user does not exist", R.USER_UNKNOWN),
    ("gmx", 550, "", "Requested action not taken: mailbox unavailable", R.USER_UNKNOWN),
    ("yandex", 550, "", "No such user!", R.USER_UNKNOWN),
    ("yahoo", 554, "", "delivery error: dd This user doesn't have a yahoo.com account (a@yahoo.com)", R.USER_UNKNOWN),
    ("rfc5321-551", 551, "", "User not local; please try <b@example.org>", R.USER_UNKNOWN),
    (
        "microsoft",
        550,
        "5.1.10",
        "5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
        R.USER_UNKNOWN,
    ),
    # mailbox_full (always soft: RFC 3463 X.2.2, RFC 5321 552)
    ("gmail", 452, "4.2.2", "4.2.2 The email account that you tried to reach is over quota.", R.MAILBOX_FULL),
    ("yandex", 552, "5.2.2", "5.2.2 Mailbox size limit exceeded", R.MAILBOX_FULL),
    (
        "web.de",
        550,
        "",
        "Benutzer hat das Speichervolumen ueberschritten. / User has exhausted allowed storage space.",
        R.MAILBOX_FULL,
    ),
    ("rfc5321-552", 552, "", "Requested mail action aborted: exceeded storage allocation", R.MAILBOX_FULL),
    # mailbox_disabled
    ("gmail", 550, "5.2.1", "5.2.1 The email account that you tried to reach is disabled.", R.MAILBOX_DISABLED),
    (
        "yahoo",
        554,
        "",
        "delivery error: dd Sorry your message to a@yahoo.com cannot be delivered. This account has been "
        "disabled or discontinued [#102].",
        R.MAILBOX_DISABLED,
    ),
    ("gmx", 550, "", "User is inactive", R.MAILBOX_DISABLED),
    # domain_not_found
    ("rfc7505", 550, "5.1.10", "5.1.10 example.org accepts no mail: it publishes a null MX", R.DOMAIN_NOT_FOUND),
    (
        "postfix",
        550,
        "5.1.2",
        "5.1.2 <a@nowhere.example>: Recipient address rejected: Domain not found",
        R.DOMAIN_NOT_FOUND,
    ),
    (
        "postfix-dsn",
        None,
        "5.4.4",
        "X-Postfix; Host or domain name not found. Name service error for "
        "name=nowhere.example type=AAAA: Host not found",
        R.DOMAIN_NOT_FOUND,
    ),
    # host_unreachable
    ("rfc3463", 451, "4.4.1", "4.4.1 No answer from host", R.HOST_UNREACHABLE),
    (
        "postfix-dsn",
        None,
        "4.4.1",
        "X-Postfix; connect to mx.example.org[192.0.2.1]:25: Connection refused",
        R.HOST_UNREACHABLE,
    ),
    ("rfc5321-421", 421, "", "mx.example.org Service not available, closing transmission channel", R.HOST_UNREACHABLE),
    # blocked
    (
        "issue-42",
        550,
        "5.0.0",
        "Your server requires confirmation. Visit http://mx.example.org/Whitelist.aspx?IP="
        "192.0.2.1 to confirm this mail server",
        R.BLOCKED,
    ),
    ("microsoft", 550, "5.7.606", "5.7.606 Access denied, banned sending IP [192.0.2.1].", R.BLOCKED),
    (
        "outlook",
        550,
        "5.7.1",
        "5.7.1 Unfortunately, messages from [192.0.2.1] weren't sent. Please contact your Internet "
        "service provider since part of their network is on our block list (S3150).",
        R.BLOCKED,
    ),
    (
        "yahoo",
        553,
        "5.7.1",
        "5.7.1 [BL21] Connections will not be accepted from 192.0.2.1, because the ip is in Spamhaus's list",
        R.BLOCKED,
    ),
    (
        "comcast",
        554,
        "",
        "resimta-ch2-18v.sys.comcast.net comcast 192.0.2.1 Comcast block for spam. Please see "
        "http://postmaster.comcast.net/smtp-error-codes.php#BL000000",
        R.BLOCKED,
    ),
    (
        "icloud",
        550,
        "5.7.1",
        "5.7.1 [CS01] Message rejected due to local policy. Please visit https://support.apple.com/en-us/HT204137",
        R.BLOCKED,
    ),
    (
        "gmx",
        554,
        "",
        "IP address is block listed. For explanation visit https://postmaster.gmx.net/en/case?c=r0201",
        R.BLOCKED,
    ),
    # spam_detected
    (
        "gmail",
        550,
        "5.7.1",
        "5.7.1 Our system has detected that this message is likely unsolicited mail.",
        R.SPAM_DETECTED,
    ),
    ("yandex", 554, "5.7.1", "5.7.1 Message rejected under suspicion of SPAM; https://ya.cc/1IrBc", R.SPAM_DETECTED),
    ("mail.ru", 550, "", "spam message rejected. Please visit http://help.mail.ru/notspam-support/id", R.SPAM_DETECTED),
    # content_rejected
    (
        "gmail",
        552,
        "5.7.0",
        "5.7.0 This message was blocked because its content presents a potential security issue.",
        R.CONTENT_REJECTED,
    ),
    ("gmail", 552, "5.3.4", "5.3.4 Your message exceeded Google's message size limits.", R.CONTENT_REJECTED),
    ("rfc3463", 554, "5.6.0", "5.6.0 Message content rejected", R.CONTENT_REJECTED),
    # authentication
    (
        "gmail",
        550,
        "5.7.26",
        "5.7.26 Unauthenticated email from example.com is not accepted due to domain's DMARC policy.",
        R.AUTHENTICATION,
    ),
    (
        "microsoft",
        550,
        "5.7.515",
        "5.7.515 Access denied, sending domain example.com doesn't meet the required authentication level.",
        R.AUTHENTICATION,
    ),
    ("icloud", 554, "5.7.1", "5.7.1 Your message was rejected due to example.com DMARC policy.", R.AUTHENTICATION),
    (
        "postfix",
        450,
        "4.7.1",
        "4.7.1 Client host rejected: cannot find your reverse hostname, [192.0.2.1]",
        R.AUTHENTICATION,
    ),
    # policy
    ("gmail", 421, "4.7.0", "4.7.0 TLS required for RCPT domain, closing connection.", R.POLICY),
    ("postfix", 554, "5.7.1", "5.7.1 <a@example.org>: Relay access denied", R.POLICY),
    ("postfix", 550, "5.1.8", "5.1.8 <shop@example.com>: Sender address rejected: Domain not found", R.POLICY),
    ("postfix", 550, "", "<shop@example.com>: Sender address rejected: Domain not found", R.POLICY),
    # rate_limited
    ("gmail", 450, "4.2.1", "4.2.1 The user you are trying to contact is receiving mail too quickly.", R.RATE_LIMITED),
    (
        "microsoft",
        451,
        "4.7.500",
        "4.7.500 Server busy. Please try again later from [192.0.2.1]. (S77719)",
        R.RATE_LIMITED,
    ),
    (
        "yahoo",
        421,
        "4.7.0",
        "4.7.0 [TSS04] Messages from 192.0.2.1 temporarily deferred due to unexpected volume or user complaints",
        R.RATE_LIMITED,
    ),
    (
        "icloud",
        421,
        "4.7.1",
        "4.7.1 Messages to a@icloud.com deferred due to excessive volume. Try again later",
        R.RATE_LIMITED,
    ),
    ("comcast", 421, "", "Too many sessions opened", R.RATE_LIMITED),
    # greylisted
    (
        "postgrey",
        450,
        "4.2.0",
        "4.2.0 <a@example.org>: Recipient address rejected: Greylisted, see "
        "http://postgrey.schweikert.ch/help/example.org.html",
        R.GREYLISTED,
    ),
    ("milter-greylist", 451, "4.7.1", "4.7.1 Greylisting in action, please come back later", R.GREYLISTED),
    # expired
    ("rfc3463", None, "4.4.7", "delivery time expired", R.EXPIRED),
    ("exim", None, "5.0.0", "retry timeout exceeded", R.EXPIRED),  # no status: reports stand in 5.0.0
    # other
    ("gmail", 451, "4.3.0", "4.3.0 Mail server temporarily rejected message.", R.OTHER),
    ("rfc5321-554", 554, "", "Transaction failed", R.OTHER),
]


def _ids():
    return [f"{reason}-{source}-{index}" for index, (source, *_, reason) in enumerate(TABLE)]


@pytest.mark.parametrize(("source", "code", "status", "text", "reason"), TABLE, ids=_ids())
def test_each_reply_gets_its_reason(source, code, status, text, reason):
    assert classify_refusal(code, status, text).reason == reason


def test_every_reason_has_at_least_two_sources():
    sources: dict[str, set[str]] = {}
    for source, *_, reason in TABLE:
        sources.setdefault(reason, set()).add(source.partition("-")[0])
    assert {reason: len(found) for reason, found in sources.items() if len(found) < 2} == {}
    assert set(sources) == set(R.values)


@pytest.mark.parametrize(("source", "code", "status", "text", "reason"), TABLE, ids=_ids())
def test_only_the_recipients_own_permanent_failures_suppress(source, code, status, text, reason):
    verdict = classify_refusal(code, status, text)
    permanent = (status or str(code)).startswith("5")
    assert verdict.suppresses == (permanent and reason in SUPPRESSING)
    if reason in SENDER_REASONS:
        assert not verdict.suppresses


def test_the_whitelist_request_in_a_postfix_dsn_is_a_hard_block_that_does_not_suppress():
    text = (
        "smtp; 550 Your server requires confirmation. Visit http://mx.example.org/Whitelist.aspx?IP=192.0.2.1 "
        "to confirm this mail server"
    )
    verdict = classify_refusal(550, "5.0.0", text)
    assert (verdict.reason, verdict.hard, verdict.suppresses, verdict.cause) == (R.BLOCKED, True, False, "reputation")


@pytest.mark.parametrize(
    ("code", "status", "text", "hard"),
    [
        (552, "5.2.2", "5.2.2 mailbox full", False),  # always soft, whatever the class
        (550, "5.4.7", "5.4.7 delivery time expired", False),
        (550, "5.1.1", "5.1.1 user unknown", True),
        (450, "4.1.1", "4.1.1 user unknown (LDAP lookup failed)", False),  # a deferral never suppresses
    ],
)
def test_hard_or_soft(code, status, text, hard):
    verdict = classify_refusal(code, status, text)
    assert verdict.hard is hard
    assert verdict.suppresses is (hard and verdict.reason in SUPPRESSING)


def test_the_services_own_routing_verdict_never_suppresses():
    text = "5.1.2 the domain nowhere.example does not exist (NXDOMAIN)"
    assert classify_refusal(550, "5.1.2", text, Speaker.RECEIVER).suppresses
    own = classify_refusal(550, "5.1.2", text, Speaker.SERVICE)
    assert (own.reason, own.hard, own.suppresses) == (R.DOMAIN_NOT_FOUND, True, False)


def test_no_failure_has_no_reason():
    assert classify_refusal(250, "2.0.0", "2.0.0 OK").reason == ""
    assert classify_refusal(None, "", "smtp; something happened").reason == ""


# --- the same refusal at RCPT and quoted in a DSN --------------------------------------------------------

# One reply per reason, as a receiver gives it at RCPT and as a relay's DSN quotes it.
SAME = {
    R.USER_UNKNOWN: "550 5.1.1 <{rcpt}>: Recipient address rejected: User unknown in local recipient table",
    R.MAILBOX_FULL: "552 5.2.2 <{rcpt}>: Mailbox full",
    R.MAILBOX_DISABLED: "550 5.2.1 The email account that you tried to reach is disabled.",
    R.DOMAIN_NOT_FOUND: "550 5.1.2 <{rcpt}>: Recipient address rejected: Domain not found",
    R.HOST_UNREACHABLE: "554 5.4.1 No answer from host",
    R.BLOCKED: "550 5.7.606 Access denied, banned sending IP [192.0.2.1].",
    R.SPAM_DETECTED: "554 5.7.1 Message rejected under suspicion of SPAM",
    R.CONTENT_REJECTED: "552 5.3.4 Your message exceeded Google's message size limits.",
    R.AUTHENTICATION: "550 5.7.26 Unauthenticated email from acme.test is not accepted due to domain's DMARC policy.",
    R.POLICY: "554 5.7.1 <{rcpt}>: Relay access denied",
    R.RATE_LIMITED: "550 5.7.1 Error: too much mail from 192.0.2.1",
    R.GREYLISTED: "550 5.7.1 Greylisted, please try again later",
    R.EXPIRED: "554 5.4.7 delivery time expired",
    R.OTHER: "554 5.0.0 Transaction failed",
}


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    return live_sink


def _dsn_of(message: Message, rcpt: str, reply: str) -> bytes:
    """A Postfix DSN (RFC 3464) whose Diagnostic-Code quotes `reply` and whose Status is its enhanced status."""
    status = reply.split()[1]
    return (
        f"From: MAILER-DAEMON@mx.example.org (Mail Delivery System)\r\nTo: {verp_address(message)}\r\n"
        "Subject: Undelivered Mail Returned to Sender\r\nAuto-Submitted: auto-replied\r\nMIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n\r\n'
        f"--b\r\nContent-Type: text/plain\r\n\r\n<{rcpt}>: host mx.example.org said: {reply}\r\n"
        "--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.org\r\n\r\n"
        f"Final-Recipient: rfc822; {rcpt}\r\nAction: failed\r\nStatus: {status}\r\n"
        f"Diagnostic-Code: smtp; {reply}\r\n"
        f"--b\r\nContent-Type: text/rfc822-headers\r\n\r\nMessage-ID: {message.message_id_header}\r\n--b--\r\n"
    ).encode()


def _verdict_of(event: MessageEvent) -> tuple[str, str, str, bool]:
    suppressed = Suppression.objects.filter(address=event.recipient.lower()).exists()
    return event.reason, event.bounce_type, event.cause, suppressed


@pytest.mark.django_db
@override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN)
@pytest.mark.parametrize("reason", list(SAME))
def test_a_refusal_at_rcpt_and_the_same_in_a_dsn_get_the_same_verdict(sink, domain, reason):
    at_rcpt, in_dsn = "rcpt@example.org", "dsn@example.org"
    sink.behaviour.rejected_rcpts = {at_rcpt: SAME[reason].format(rcpt=at_rcpt)}
    refused = MessageFactory(domain=domain, to=[at_rcpt], next_attempt_at=timezone.now() - timedelta(seconds=1))
    dispatch_batch(public_id=refused.public_id)
    delivered = MessageFactory(domain=domain, status=Status.DELIVERED, to=[in_dsn])
    raw = _dsn_of(delivered, in_dsn, SAME[reason].format(rcpt=in_dsn))
    assert inbound_deliver(envelope_from="", recipients=[verp_address(delivered)], raw=raw) == []

    by_rcpt = refused.events.get(recipient=at_rcpt)
    by_report = delivered.events.get(recipient=in_dsn)
    assert _verdict_of(by_rcpt)[0] == reason
    assert _verdict_of(by_rcpt) == _verdict_of(by_report)
    hard = by_report.bounce_type == "hard"
    assert by_report.type == (EventType.BOUNCED if hard else EventType.SOFT_BOUNCED)

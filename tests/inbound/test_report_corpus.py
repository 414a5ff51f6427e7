"""Real-world-shaped bounces and complaints (tests/inbound/corpus/*.eml), each classified as expected.

Every message is also pushed through the inbound service against a real sent message: reports
update it, and what is not a report is kept as received mail, never dropped or crashed on.
"""

from pathlib import Path

import pytest
from django.test import override_settings

from messaging.inbound.reports import classify
from messaging.inbound.services import inbound_deliver
from messaging.models import Direction, EventType, Message, Status, Suppression
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, verp_address

CORPUS = Path(__file__).parent / "corpus"
ORIGINAL = "<msg_corpusoriginal0000000001@acme.example.com>"

# file: (kind, [(recipient, enhanced status)], Message-ID of the original found in the report)
EXPECTED = {
    "postfix_user_unknown.eml": ("bounce", [("nobody@example.org", "5.1.1")], ORIGINAL),
    "postfix_delayed.eml": ("delay", [("full@example.org", "4.2.2")], ORIGINAL),
    "exim_dsn_failed.eml": ("bounce", [("gone@example.net", "5.0.0")], ORIGINAL),
    "exim_plain_failed.eml": ("bounce", [("olduser@example.net", "5.1.1")], ORIGINAL),
    "exim_plain_delayed.eml": ("delay", [("slow@example.net", "4.7.1")], ""),
    "qmail_failed.eml": ("bounce", [("nosuch@example.com", "5.1.1")], ORIGINAL),
    "sendmail_dsn.eml": ("bounce", [("student@example.edu", "5.2.1")], ORIGINAL),
    "exchange_ndr.eml": ("bounce", [("jane.doe@contoso.example", "5.1.10")], ORIGINAL),
    "exchange_delayed.eml": ("delay", [("busy@contoso.example", "4.4.7")], ORIGINAL),
    "gmail_dsn_failure.eml": ("bounce", [("doesnotexist123@gmail.com", "5.1.1")], ORIGINAL),
    "gmail_dsn_delay.eml": ("delay", [("someone@slowhost.example", "4.7.0")], ORIGINAL),
    "multi_recipient_mixed.eml": ("bounce", [("first@example.org", "5.7.1"), ("second@example.org", "4.4.1")], ""),
    "yahoo_arf.eml": ("complaint", [("angry.user@yahoo.com", "")], ORIGINAL),
    "outlook_arf.eml": ("complaint", [("someone@hotmail.com", "")], ORIGINAL),
    "aol_arf_redacted.eml": ("complaint", [("", "")], ORIGINAL),
    "arf_not_spam.eml": ("none", [], ""),
    "dsn_success_relayed.eml": ("none", [], ""),
    "vacation_autoreply.eml": ("none", [], ""),
    "out_of_office_plain.eml": ("none", [], ""),
    "human_reply.eml": ("none", [], ""),
    "broken_truncated_dsn.eml": ("bounce", [("nobody@example.org", "5.1.1")], ""),
    "broken_missing_report_part.eml": ("bounce", [("closed@example.org", "5.1.1")], ""),
    "broken_missing_feedback_part.eml": ("complaint", [("reporter@isp.example", "")], ORIGINAL),
    "broken_wrong_charset.eml": ("bounce", [("nobody@example.org", "5.1.1")], ORIGINAL),
    "broken_8bit_headers.eml": ("bounce", [("élodie@courrier.example.fr", "5.1.1")], ""),
    "broken_garbage.eml": ("none", [], ""),
    # Hand-written attacks on precision: only the address that failed, and no auto-reply as a bounce.
    "moved_alternative_address.eml": ("bounce", [("oldname@corp.example", "5.1.6")], ORIGINAL),
    "list_member_failed.eml": ("bounce", [("dana@example.net", "5.1.1")], ORIGINAL),
    "challenge_response.eml": ("none", [], ""),
    "whitelist_request.eml": ("none", [], ""),
    "vacation_with_code.eml": ("none", [], ""),
}


def test_every_corpus_file_has_an_expectation():
    assert sorted(path.name for path in CORPUS.glob("*.eml")) == sorted(EXPECTED)
    assert len(EXPECTED) >= 20


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_classification(name):
    report = classify((CORPUS / name).read_bytes())
    kind, recipients, original = EXPECTED[name]
    assert report.kind == kind
    assert [(recipient.address, recipient.status) for recipient in report.recipients] == recipients
    assert report.original_message_id == original


def expected_status(kind: str, recipients: list[tuple[str, str]]) -> str:
    """`bounced` only when every recipient bounced hard (the other recipient of the mixed report is only delayed)."""
    if kind == "complaint":
        return Status.COMPLAINED
    every_one_bounced = all(status.startswith("5") for _, status in recipients)
    return Status.BOUNCED if kind == "bounce" and every_one_bounced else Status.DELIVERED


def expected_suppressions(kind: str, recipients: list[tuple[str, str]]) -> list[tuple[str, str]]:
    if kind == "bounce":
        # A hard bounce suppresses, but not one blaming the sender (messaging/bounces.py): the X.7.x of the
        # mixed report's "550 5.7.1 Message rejected as spam" is about the message, not the address.
        return sorted((address, "bounce") for address, status in recipients if status[:3] in ("5.0", "5.1", "5.2"))
    if kind == "complaint":
        # A redacted complainer is taken to be the original's one recipient.
        return [(recipients[0][0] or "reader@example.org", "complaint")]
    return []


@pytest.mark.parametrize("name", sorted(EXPECTED))
@override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN)
def test_processing_against_a_sent_message(name, domain):
    kind, recipients, _ = EXPECTED[name]
    to = [address for address, _ in recipients if address] or ["Reader <reader@example.org>"]
    sent = MessageFactory(domain=domain, status=Status.DELIVERED, to=to)
    # Each recipient has its own return path: a report about several reaches each of theirs.
    verps = [verp_address(sent, index) for index in range(len(to))]

    inbound_deliver(envelope_from="", recipients=verps, raw=(CORPUS / name).read_bytes())

    sent.refresh_from_db()
    events = list(sent.events.values_list("type", flat=True))
    kept = Message.objects.filter(direction=Direction.RECEIVED)
    assert sent.status == expected_status(kind, recipients)
    if kind == "none":
        assert (events, kept.count(), kept.get().to) == ([], 1, verps)
        assert bytes(kept.get().raw) == (CORPUS / name).read_bytes()
    else:
        assert len(events) == len(recipients)
        assert not kept.exists()
    if kind == "delay":
        assert set(events) == {EventType.DELAYED}
    assert sorted(Suppression.objects.values_list("address", "reason")) == expected_suppressions(kind, recipients)


def dsn_with_action(action: str, status: str) -> bytes:
    return (
        "From: MAILER-DAEMON@mx.example.org\r\nTo: bounces@b.example\r\nSubject: Delivery Status Notification\r\n"
        'MIME-Version: 1.0\r\nContent-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain\r\n\r\nDelivery failed.\r\n"
        "--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mx.example.org\r\n\r\n"
        f"Final-Recipient: rfc822; user@example.org\r\nAction: {action}\r\nStatus: {status}\r\n--b--\r\n"
    ).encode()


@pytest.mark.parametrize(
    ("action", "status", "outcome"),
    [
        ("failed", "5.1.1", "bounce"),
        ("failure", "5.1.1", "bounce"),  # RFC 3464 says "failed"; real MTAs write these too
        ("error", "5.0.0", "bounce"),
        ("expired", "4.4.7", "soft_bounce"),
        ("failed", "4.2.2", "soft_bounce"),  # the relay gave up on a full mailbox: not permanent
        ("delayed", "4.4.1", "delay"),
        ("delivered", "2.0.0", None),
    ],
)
def test_dsn_action_variants(action, status, outcome):
    report = classify(dsn_with_action(action, status))
    assert [(r.address, r.outcome, r.status) for r in report.recipients] == (
        [("user@example.org", outcome, status)] if outcome else []
    )


@pytest.mark.parametrize(
    "headers",
    [
        "From: Jane <jane@example.org>\r\nAuto-Submitted: auto-replied\r\nSubject: Re: your mail",
        "From: jane@example.org\r\nX-Autoreply: yes\r\nSubject: Undeliverable? No, on holiday",
        "From: jane@example.org\r\nPrecedence: auto_reply\r\nSubject: Returned mail",
        "From: Spam Arrest <noreply@challenge.example>\r\nSubject: Please confirm your message",
        "From: jane@example.org\r\nSubject: Out of Office: delivery failed notices will be answered later",
    ],
    ids=["auto-submitted", "x-autoreply", "precedence", "challenge-response", "out-of-office-subject"],
)
def test_auto_replies_and_challenges_are_not_reports(headers):
    raw = f"{headers}\r\nTo: bounces@b.example\r\n\r\nI am away. 550 user unknown <someone@example.org>\r\n"
    assert classify(raw.encode()).kind == "none"


def test_a_multi_report_arf_names_every_complainer():
    raw = (
        b"From: fbl@isp.example\r\nTo: fbl@b.example\r\nSubject: Abuse report\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/report; report-type=feedback-report; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain\r\n\r\nThree reports.\r\n"
        b"--b\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nVersion: 1\r\n"
        b"Original-Rcpt-To: a@example.org\r\nOriginal-Rcpt-To: b@example.org\r\nOriginal-Rcpt-To: c@example.org\r\n"
        b"--b--\r\n"
    )
    report = classify(raw)
    assert [(r.address, r.outcome, r.feedback_type) for r in report.recipients] == [
        (address, "complaint", "abuse") for address in ("a@example.org", "b@example.org", "c@example.org")
    ]


def test_a_microsoft_jmrp_complaint_names_the_original_recipient():
    raw = (
        b"From: staff@hotmail.com\r\nTo: fbl@b.example\r\nSubject: complaint about message from 192.0.2.1\r\n"
        b'MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: message/rfc822\r\n\r\nX-HmXmrOriginalRecipient: Reader@Outlook.example\r\n"
        b"From: shop@acme.example.com\r\nTo: reader@outlook.example\r\n"
        b"Message-ID: <msg_x@acme.example.com>\r\n\r\nhi\r\n"
        b"--b--\r\n"
    )
    report = classify(raw)
    assert (report.kind, [r.address for r in report.recipients]) == ("complaint", ["reader@outlook.example"])
    assert report.original_message_id == "<msg_x@acme.example.com>"


def test_a_spam_rejection_that_mentions_whitelisting_is_still_a_bounce():
    raw = (
        b"From: Mail Delivery System <MAILER-DAEMON@mx.example.org>\r\nTo: bounces@b.example\r\n"
        b"Subject: Undelivered Mail Returned to Sender\r\n\r\n"
        b"<user@example.org>: host mx.example.org said: 550 5.7.1 Message rejected as spam; ask the\r\n"
        b"    recipient to whitelist your domain (in reply to end of DATA command)\r\n"
    )
    report = classify(raw)
    assert [(r.address, r.outcome, r.status) for r in report.recipients] == [("user@example.org", "bounce", "5.7.1")]


@pytest.mark.parametrize(
    ("prose", "failed"),
    [
        ("Delivery to x@example.org failed: 550 5.1.1 gone.\r\nPlease use y@example.org instead.", "x@example.org"),
        ("Delivery to x@example.org failed: 550 5.1.1.\r\nHer mail is forwarded to y@example.org.", "x@example.org"),
        ("x@example.org: 550 5.1.6 moved. New address:\r\n  y@example.org", "x@example.org"),
        ("Delivery to x@example.org failed: 550 5.1.1 unknown.\r\nFor help contact help@example.org", "x@example.org"),
    ],
    ids=["use-instead", "forwarded-to", "new-address-next-line", "contact"],
)
def test_an_address_the_prose_offers_instead_is_not_a_failed_recipient(prose, failed):
    raw = (
        "From: postmaster@mx.example.org\r\nTo: bounces@b.example\r\nSubject: Undeliverable: your receipt\r\n\r\n"
        f"Your message could not be delivered.\r\n\r\n{prose}\r\n"
    ).encode()
    assert [r.address for r in classify(raw).recipients] == [failed]


def test_the_senders_of_a_returned_message_quoted_inline_are_not_failed_recipients():
    raw = (
        b"From: postmaster@mx.example.org\r\nTo: bounces@b.example\r\nSubject: Undeliverable: your receipt\r\n\r\n"
        b"Delivery failed: 550 5.1.1 unknown recipient\r\nreplies go to help@acme.example.com, the sender\r\n"
        b"was shop@acme.example.com\r\n\r\n"
        b"----- Original message follows -----\r\n\r\n"
        b"From: shop@acme.example.com\r\nReply-To: help@acme.example.com\r\nTo: reader@example.org\r\n\r\nHi\r\n"
    )
    assert [r.address for r in classify(raw).recipients] == ["reader@example.org"]


def test_a_plain_text_bounce_echoing_a_confirmation_subject_is_still_a_bounce():
    raw = (
        b"From: System Administrator <postmaster@contoso.example>\r\nTo: bounces@b.example\r\n"
        b"Subject: Undeliverable: Please confirm your email address\r\n\r\n"
        b"Your message did not reach some or all of the intended recipients.\r\n\r\n"
        b"The following recipient(s) could not be reached:\r\n\r\n"
        b"      new.user@contoso.example on 20/11/2026 10:00\r\n"
        b"            550 5.1.1 The e-mail account does not exist at the organization.\r\n"
    )
    report = classify(raw)
    assert [(r.address, r.outcome, r.status) for r in report.recipients] == [
        ("new.user@contoso.example", "bounce", "5.1.1")
    ]


def test_a_vacation_notice_from_a_role_address_with_only_auto_submitted_is_not_a_bounce():
    raw = (
        b"From: mail@bakery.example\r\nTo: bounces@b.example\r\nSubject: Re: Your receipt\r\n"
        b"Auto-Submitted: auto-replied\r\n\r\n"
        b"We are closed for the holidays and back on 4 January. Mail sent before then is\r\n"
        b"permanently unread (550 orders are ahead of yours).\r\n"
    )
    assert classify(raw).kind == "none"


def test_a_redacted_complaint_about_mail_to_a_list_names_no_one():
    raw = (
        b"From: fbl@isp.example\r\nTo: fbl@b.example\r\nSubject: Abuse report\r\nMIME-Version: 1.0\r\n"
        b'Content-Type: multipart/report; report-type=feedback-report; boundary="b"\r\n\r\n'
        b"--b\r\nContent-Type: text/plain\r\n\r\nA complaint.\r\n"
        b"--b\r\nContent-Type: message/feedback-report\r\n\r\nFeedback-Type: abuse\r\nVersion: 1\r\n"
        b"--b\r\nContent-Type: message/rfc822\r\n\r\nFrom: shop@acme.example.com\r\nTo: team@lists.example.org\r\n"
        b"List-Post: <mailto:team@lists.example.org>\r\nMessage-ID: <msg_y@acme.example.com>\r\n\r\nhi\r\n"
        b"--b--\r\n"
    )
    assert [(r.address, r.outcome) for r in classify(raw).recipients] == [("", "complaint")]


def test_a_failure_line_naming_the_sender_first_names_the_recipient():
    raw = (
        b"From: postmaster@mx.example.org\r\nTo: bounces@b.example\r\nSubject: Undeliverable: your receipt\r\n\r\n"
        b"Your message from shop@acme.example.com to reader@example.org was rejected: 550 5.1.1 unknown.\r\n\r\n"
        b"----- Original message follows -----\r\n\r\n"
        b"From: shop@acme.example.com\r\nTo: Reader <reader@example.org>, other@example.org\r\n\r\nHi\r\n"
    )
    assert [(r.address, r.status) for r in classify(raw).recipients] == [("reader@example.org", "5.1.1")]

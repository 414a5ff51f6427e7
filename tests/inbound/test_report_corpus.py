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


@pytest.mark.parametrize("name", sorted(EXPECTED))
@override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN)
def test_processing_against_a_sent_message(name, domain):
    kind, recipients, _ = EXPECTED[name]
    to = [address for address, _ in recipients if address] or ["Reader <reader@example.org>"]
    sent = MessageFactory(domain=domain, status=Status.DELIVERED, to=to)
    verp = verp_address(sent)

    inbound_deliver(envelope_from="", recipients=[verp], raw=(CORPUS / name).read_bytes())

    sent.refresh_from_db()
    events = list(sent.events.values_list("type", flat=True))
    kept = Message.objects.filter(direction=Direction.RECEIVED)
    # `bounced` only when every recipient bounced hard (the other recipient of the mixed report is only delayed).
    every_one_bounced = all(status.startswith("5") for _, status in recipients)
    expected_status = {
        "bounce": Status.BOUNCED if every_one_bounced else Status.DELIVERED,
        "complaint": Status.COMPLAINED,
    }
    expected_status = expected_status.get(kind, Status.DELIVERED)
    assert sent.status == expected_status
    if kind == "none":
        assert (events, kept.count(), kept.get().to) == ([], 1, [verp])
        assert bytes(kept.get().raw) == (CORPUS / name).read_bytes()
    else:
        assert len(events) == len(recipients) and not kept.exists()
    if kind == "delay":
        assert set(events) == {EventType.DELAYED}
    suppressed = sorted(Suppression.objects.values_list("address", "reason"))
    if kind == "bounce":
        assert suppressed == sorted((address, "bounce") for address, status in recipients if status.startswith("5"))
    elif kind == "complaint":
        # A redacted complainer is taken to be the original's one recipient.
        assert suppressed == [(recipients[0][0] or "reader@example.org", "complaint")]
    else:
        assert suppressed == []

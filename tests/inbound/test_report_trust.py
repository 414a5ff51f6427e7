"""Reports can only touch what they are about, once; hard and soft bounces per recipient; the status rule.

Each report goes through `inbound_deliver`, as the SMTP server hands it over, against a real sent message.
"""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from messaging.inbound.services import inbound_deliver
from messaging.models import EventType, Message, MessageEvent, Status, Suppression, SuppressionReason
from messaging.outbound.attempt import suppressed_in
from messaging.selectors import recipient_outcomes
from messaging.verp import verp_tag
from tests.factories import MessageFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN, arf, dsn, global_dsn, verp_address, wire_bytes

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("return_path")]

FEEDBACK_LOOP = f"fbl@{RETURN_PATH_DOMAIN}"


@pytest.fixture
def return_path():
    with override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN):
        yield


def sent(domain, *recipients: str, **fields) -> Message:
    message = MessageFactory(domain=domain, status=Status.DELIVERED, to=list(recipients or ["User <user@example.org>"]))
    message.message_id_header = f"<{message.public_id}@{domain.name}>"
    message.save(update_fields=["message_id_header"])
    if fields:
        Message.objects.filter(pk=message.pk).update(**fields)
    return message


def deliver(raw: bytes, to: str) -> None:
    assert inbound_deliver(envelope_from="", recipients=[to], raw=raw) == []


def nothing_changed(message: Message) -> None:
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert not message.events.exists()
    assert not Suppression.objects.exists()


@pytest.mark.parametrize("original", [True, False], ids=["with-original-headers", "without-original-headers"])
def test_a_bounce_to_the_verp_address_naming_a_non_recipient_changes_nothing(domain, original):
    message = sent(domain, "user@example.org")
    deliver(
        wire_bytes(dsn(message=message, recipient="stranger@example.org", original=original)), verp_address(message)
    )
    nothing_changed(message)


def test_a_bounce_without_verp_naming_a_non_recipient_changes_nothing(domain):
    message = sent(domain, "user@example.org")
    deliver(wire_bytes(dsn(message=message, recipient="stranger@example.org")), FEEDBACK_LOOP)
    nothing_changed(message)


@pytest.mark.parametrize("original", [True, False], ids=["with-original", "without-original"])
@pytest.mark.parametrize("verp", [True, False], ids=["verp", "feedback-loop-address"])
def test_a_complaint_naming_a_non_recipient_changes_nothing(domain, original, verp):
    message = sent(domain, "user@example.org")
    to = verp_address(message) if verp else FEEDBACK_LOOP
    deliver(wire_bytes(arf(message=message, recipient="stranger@example.org", to=to, original=original)), to)
    nothing_changed(message)


def test_a_bounce_listing_many_made_up_recipients_suppresses_only_the_real_one(domain):
    message = sent(domain, "user@example.org")
    report = wire_bytes(dsn(message=message, recipient="user@example.org"))
    forged = b"".join(
        b"Final-Recipient: rfc822; made-up-%d@example.org\r\nAction: failed\r\nStatus: 5.1.1\r\n\r\n" % n
        for n in range(300)
    )
    report = report.replace(b"Final-Recipient:", forged + b"Final-Recipient:", 1)
    deliver(report, verp_address(message))
    assert list(Suppression.objects.values_list("address", flat=True)) == ["user@example.org"]


def test_the_same_report_twice_changes_nothing_the_second_time(domain):
    message = sent(domain, "a@example.org", "b@example.org")
    for _ in range(2):
        deliver(wire_bytes(dsn(message=message, recipient="a@example.org")), verp_address(message, 0))
        to_b = verp_address(message, 1)
        deliver(wire_bytes(arf(message=message, recipient="b@example.org", to=to_b)), to_b)
    types = sorted(message.events.values_list("type", "recipient"))
    assert types == [(EventType.BOUNCED, "a@example.org"), (EventType.COMPLAINED, "b@example.org")]
    assert Suppression.objects.count() == 2


def test_a_verp_address_with_a_wrong_tag_names_no_message(domain):
    message = sent(domain, "user@example.org")
    forged = f"bounces+{message.public_id}.{'0' * 10}@{RETURN_PATH_DOMAIN}"
    deliver(wire_bytes(dsn(message=message, recipient="user@example.org", original=False)), forged)
    nothing_changed(message)


@pytest.mark.parametrize(
    ("accept", "age", "applied"),
    [(True, timedelta(days=1), True), (True, timedelta(days=8), False), (False, timedelta(days=1), False)],
)
def test_the_unsigned_verp_form_is_accepted_for_recent_mail_while_enabled(domain, settings, accept, age, applied):
    settings.MAILSERVICE_VERP_ACCEPT_UNSIGNED = accept
    message = sent(domain, "user@example.org", created_at=timezone.now() - age)
    unsigned = f"bounces+{message.public_id}@{RETURN_PATH_DOMAIN}"
    deliver(wire_bytes(dsn(message=message, recipient="user@example.org", original=False)), unsigned)
    assert Suppression.objects.filter(address="user@example.org").exists() is applied


def test_the_verp_tag_survives_a_relay_changing_the_case_of_the_address(domain):
    message = sent(domain, "user@example.org")
    deliver(
        wire_bytes(dsn(message=message, recipient="user@example.org", original=False)), verp_address(message).upper()
    )
    assert Suppression.objects.filter(address="user@example.org", reason=SuppressionReason.BOUNCE).exists()
    assert len(verp_tag(message.public_id)) == 10


def test_a_final_failure_with_a_temporary_status_is_a_soft_bounce_and_suppresses_nothing_for_good(domain):
    message = sent(domain, "full@example.org")
    deliver(wire_bytes(dsn(message=message, recipient="full@example.org", status="4.2.2")), verp_address(message))
    message.refresh_from_db()
    event = message.events.get()
    assert (event.type, event.recipient, event.enhanced_status) == (EventType.SOFT_BOUNCED, "full@example.org", "4.2.2")
    assert "452 4.2.2" in event.detail
    assert message.status == Status.DELIVERED
    assert not Suppression.objects.exists()


def test_a_bounce_whose_cause_is_the_sender_is_hard_and_suppresses_no_one(domain):
    """The policy dispatch's refusals go through too (messaging/bounces.py): `5.7.1` blames the sender."""
    message = sent(domain, "user@example.org")
    deliver(wire_bytes(dsn(message=message, recipient="user@example.org", status="5.7.1")), verp_address(message))
    event = message.events.get()
    assert (event.type, event.bounce_type, event.cause) == (EventType.BOUNCED, "hard", "policy")
    assert not Suppression.objects.exists()


def test_three_soft_bounces_suppress_the_address_for_seven_days(domain):
    for _ in range(3):
        message = sent(domain, "full@example.org")
        deliver(wire_bytes(dsn(message=message, recipient="full@example.org", status="4.2.2")), verp_address(message))
    entry = Suppression.objects.get()
    assert (entry.address, entry.reason) == ("full@example.org", SuppressionReason.SOFT_BOUNCE)
    assert timedelta(days=6, hours=23) < entry.expires_at - timezone.now() <= timedelta(days=7)
    assert suppressed_in([message]) == {(domain.pk, False, "full@example.org")}

    Suppression.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert suppressed_in([message]) == set()  # lapsed: the address is mailed again

    deliver(wire_bytes(dsn(message=message, recipient="full@example.org")), verp_address(message))
    entry.refresh_from_db()
    assert (entry.reason, entry.expires_at) == (SuppressionReason.BOUNCE, None)  # a hard bounce is for good


def test_a_soft_bounce_reported_twice_counts_once(domain):
    messages = [sent(domain, "full@example.org") for _ in range(2)]
    for message in [messages[0], messages[0], messages[1]]:
        deliver(wire_bytes(dsn(message=message, recipient="full@example.org", status="4.2.2")), verp_address(message))
    assert not Suppression.objects.exists()
    assert MessageEvent.objects.filter(type=EventType.SOFT_BOUNCED).count() == 2


def test_a_global_dsn_for_a_utf8_address_suppresses_exactly_that_address(domain):
    message = sent(domain, "Zoë <zoë@example.org>", "zoe@example.org")
    deliver(global_dsn(message=message, recipient="zoë@example.org"), verp_address(message, 0))
    assert list(Suppression.objects.values_list("address", flat=True)) == ["zoë@example.org"]
    assert message.events.get().recipient == "zoë@example.org"


def test_one_of_two_recipients_bouncing_leaves_the_message_delivered_and_both_bouncing_makes_it_bounced(domain):
    message = sent(domain, "a@example.org", "B <b@example.org>")
    deliver(wire_bytes(dsn(message=message, recipient="a@example.org")), verp_address(message, 0))
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert [(o.address, o.label) for o in recipient_outcomes(message=message)] == [
        ("a@example.org", "bounced (hard)"),
        ("b@example.org", "delivered"),
    ]

    deliver(wire_bytes(dsn(message=message, recipient="b@example.org")), verp_address(message, 1))
    message.refresh_from_db()
    assert message.status == Status.BOUNCED


def test_a_complaint_from_any_recipient_makes_the_message_complained(domain):
    message = sent(domain, "a@example.org", "b@example.org")
    deliver(wire_bytes(dsn(message=message, recipient="a@example.org")), verp_address(message, 0))
    deliver(
        wire_bytes(arf(message=message, recipient="b@example.org", to=verp_address(message, 1))),
        verp_address(message, 1),
    )
    message.refresh_from_db()
    assert message.status == Status.COMPLAINED
    complaint = message.events.get(type=EventType.COMPLAINED)
    assert (complaint.recipient, complaint.feedback_type) == ("b@example.org", "abuse")


def test_a_complaint_without_verp_finds_a_submitted_message_by_its_own_message_id_in_any_case(domain):
    api_mail = sent(domain, "user@example.org")
    submitted = sent(
        domain, "user@example.org", envelope_recipients=["user@example.org"], message_id_header="<Own.Id-7@app.example>"
    )
    submitted.refresh_from_db()

    complaint = arf(message=submitted, recipient="user@example.org", to=FEEDBACK_LOOP)
    complaint.get_payload()[-1].get_payload()[0].replace_header("Message-ID", "<OWN.ID-7@APP.EXAMPLE>")
    deliver(wire_bytes(complaint), FEEDBACK_LOOP)

    submitted.refresh_from_db()
    api_mail.refresh_from_db()
    assert submitted.status == Status.COMPLAINED
    assert (api_mail.status, api_mail.events.exists()) == (Status.DELIVERED, False)


def test_the_console_shows_each_recipients_outcome(domain, admin_client):
    message = sent(domain, "a@example.org", "b@example.org", "c@example.org")
    deliver(wire_bytes(dsn(message=message, recipient="a@example.org")), verp_address(message, 0))
    deliver(wire_bytes(dsn(message=message, recipient="b@example.org", status="4.2.2")), verp_address(message, 1))

    page = admin_client.get(f"/admin/messaging/message/{message.pk}/change/").content.decode()

    outcomes = page[page.index('<table id="recipient-outcomes"') :]
    outcomes = outcomes[: outcomes.index("</table>")]
    for address, label, status in [
        ("a@example.org", "bounced (hard)", "5.1.1"),
        ("b@example.org", "bounced (soft)", "4.2.2"),
        ("c@example.org", "delivered", ""),
    ]:
        row = outcomes[outcomes.index(f"<td>{address}</td>") :]
        assert row.startswith(f"<td>{address}</td><td><strong>{label}</strong></td><td>{status}</td>")

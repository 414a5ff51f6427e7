"""The inbound SMTP server as a real process, spoken to with smtplib, read back through the API."""

import smtplib
import time
from collections.abc import Iterator
from email.message import Message as EmailMessage

import httpx
import pytest
from django.db import connection, transaction

from apikeys.models import ApiKey
from domains.models import Domain
from messaging.models import EventType, Message, Status, Suppression
from messaging.smtpd import CONNECTION_CHECK_SECONDS
from tests.factories import DomainFactory, MessageFactory
from tests.harness import current_database_url, inbound_smtp_server, web_server
from tests.inbound.mail import RETURN_PATH_DOMAIN, arf, dsn, plain_mail, verp_address, wire_bytes

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

MAX_BYTES = 50_000
ROUTE_MEMORY_SECONDS = 1.0


@pytest.fixture(scope="module")
def inbound(django_db_setup) -> Iterator[int]:
    env = {
        "MAILSERVICE_RETURN_PATH_DOMAIN": RETURN_PATH_DOMAIN,
        "MAILSERVICE_INBOUND_MAX_BYTES": str(MAX_BYTES),
        "MAILSERVICE_INBOUND_ROUTE_MEMORY_SECONDS": str(ROUTE_MEMORY_SECONDS),
        # Small samples for the pause test: the defaults (100 sends, 5 bounces) are tested in tests/domains.
        "MAILSERVICE_SAFEGUARD_MIN_SENDS": "20",
        "MAILSERVICE_SAFEGUARD_MIN_BOUNCES": "2",
    }
    with inbound_smtp_server(**env) as port:
        yield port


@pytest.fixture(scope="module")
def web(django_db_setup) -> Iterator[str]:
    with web_server(workers=1) as base_url:
        yield base_url


def deliver(port: int, mail: EmailMessage, *, to: str, sender: str = "") -> None:
    with smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        smtp.sendmail(sender, [to], wire_bytes(mail))


def get(base_url: str, key: ApiKey, path: str) -> httpx.Response:
    return httpx.get(f"{base_url}{path}", headers={"Authorization": f"Bearer {key.secret}"}, timeout=10)


def sent_message(domain: Domain, *, recipient: str = "user@example.org") -> Message:
    message = MessageFactory(domain=domain, status=Status.DELIVERED, to=[f"User <{recipient}>"])
    message.message_id_header = f"<{message.public_id}@{domain.name}>"
    message.save(update_fields=["message_id_header"])
    return message


def test_received_mail_is_listed_for_its_domain_only(inbound, web, full_key, other_domain_key):
    mail = plain_mail(sender="Alice <alice@example.org>", to="help@acme.example.com", subject="Héllo", text="Body ✓")
    deliver(inbound, mail, to="help@acme.example.com", sender="alice@example.org")

    mine = get(web, full_key, "/v1/messages?direction=received").json()["data"]
    theirs = get(web, other_domain_key, "/v1/messages?direction=received").json()["data"]
    assert [(m["from"], m["to"], m["subject"], m["status"]) for m in mine] == [
        ("Alice <alice@example.org>", ["help@acme.example.com"], "Héllo", "received")
    ]
    assert theirs == []
    assert get(web, full_key, f"/v1/messages/{mine[0]['id']}").json()["text"] == "Body ✓"
    stored = Message.objects.get(public_id=mine[0]["id"])
    assert (bytes(stored.raw), stored.envelope_from) == (wire_bytes(mail), "alice@example.org")
    assert list(stored.events.values_list("type", flat=True)) == [EventType.RECEIVED]


@pytest.mark.parametrize("recipient", ["victim@elsewhere.example", "someone@unverified.example.com"])
def test_mail_for_other_domains_is_refused_at_rcpt(inbound, domain, recipient):
    DomainFactory(name="unverified.example.com", verified=False)
    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        deliver(inbound, plain_mail(sender="a@example.org", to=recipient, subject="relay?", text="x"), to=recipient)
    assert refused.value.recipients[recipient][0] == 550
    assert not Message.objects.exists()


def test_mail_for_a_domain_unverified_after_rcpt_is_refused_at_data(inbound, domain):
    mail = plain_mail(sender="a@example.org", to="help@acme.example.com", subject="too late", text="x")
    with smtplib.SMTP("127.0.0.1", inbound, timeout=10) as smtp:
        smtp.ehlo()
        smtp.mail("a@example.org")
        assert smtp.rcpt("help@acme.example.com")[0] == 250
        Domain.objects.filter(pk=domain.pk).update(verified=False)
        assert smtp.data(wire_bytes(mail))[0] == 550
    assert not Message.objects.exists()


def test_a_domain_unverified_is_refused_at_rcpt_once_the_server_forgets_it(inbound, domain):
    mail = plain_mail(sender="a@example.org", to="help@acme.example.com", subject="hello", text="x")
    deliver(inbound, mail, to="help@acme.example.com")  # the server now remembers the recipient for a while
    Domain.objects.filter(pk=domain.pk).update(verified=False)
    time.sleep(ROUTE_MEMORY_SECONDS)

    with pytest.raises(smtplib.SMTPRecipientsRefused) as refused:
        deliver(inbound, mail, to="help@acme.example.com")
    assert refused.value.recipients["help@acme.example.com"][0] == 550
    assert Message.objects.count() == 1


def test_mail_over_the_size_cap_is_refused(inbound, domain):
    big = plain_mail(sender="a@example.org", to="help@acme.example.com", subject="big", text="x" * MAX_BYTES)
    with smtplib.SMTP("127.0.0.1", inbound, timeout=10) as smtp:
        smtp.ehlo()
        assert smtp.esmtp_features["size"] == str(MAX_BYTES)
        # Announced with SIZE=, refused at MAIL FROM; unannounced, refused after the data.
        with pytest.raises(smtplib.SMTPSenderRefused) as announced:
            smtp.sendmail("a@example.org", ["help@acme.example.com"], wire_bytes(big))
        assert announced.value.smtp_code == 552
        smtp.rset()
        smtp.mail("a@example.org")
        smtp.rcpt("help@acme.example.com")
        assert smtp.data(wire_bytes(big))[0] == 552
    assert not Message.objects.exists()


def test_a_hard_bounce_marks_the_message_bounced_and_suppresses_the_address(inbound, web, domain, full_key):
    message = sent_message(domain, recipient="gone@example.org")
    deliver(inbound, dsn(message=message, recipient="gone@example.org"), to=verp_address(message))

    assert get(web, full_key, f"/v1/messages/{message.public_id}").json()["status"] == "bounced"
    event = message.events.get(type=EventType.BOUNCED)
    assert (event.recipient, event.enhanced_status, event.detail) == (
        "gone@example.org",
        "5.1.1",
        "smtp; 550 5.1.1 <gone@example.org>: Recipient address rejected (reason: user_unknown)",
    )
    assert Suppression.objects.filter(domain=domain, address="gone@example.org", reason="bounce").exists()
    assert get(web, full_key, "/v1/messages?direction=received").json()["data"] == []


def test_a_delay_report_is_recorded_as_an_event_only(inbound, domain):
    message = sent_message(domain, recipient="slow@example.org")
    deliver(
        inbound,
        dsn(message=message, recipient="slow@example.org", action="delayed", status="4.2.2"),
        to=verp_address(message),
    )

    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert list(message.events.values_list("type", "recipient")) == [(EventType.DELAYED, "slow@example.org")]
    assert not Suppression.objects.exists()


def test_a_complaint_found_by_message_id_marks_the_message_complained(inbound, domain):
    message = sent_message(domain, recipient="angry@example.net")
    feedback_loop = f"fbl@{RETURN_PATH_DOMAIN}"
    deliver(inbound, arf(message=message, recipient="angry@example.net", to=feedback_loop), to=feedback_loop)

    message.refresh_from_db()
    assert message.status == Status.COMPLAINED
    assert message.events.filter(type=EventType.COMPLAINED, recipient="angry@example.net").exists()
    assert Suppression.objects.filter(domain=domain, address="angry@example.net", reason="complaint").exists()


def test_a_report_about_an_unknown_message_is_accepted_and_dropped(inbound, domain):
    stranger = MessageFactory.build(domain=domain, public_id="msg_unknown", message_id_header="<msg_unknown@x.example>")
    deliver(inbound, dsn(message=stranger, recipient="a@example.org"), to=verp_address(stranger))
    assert not Message.objects.exists()
    assert not Suppression.objects.exists()


def test_crossing_the_bounce_rate_pauses_the_domain_and_sends_get_503(inbound, web, domain, full_key):
    delivered = [sent_message(domain, recipient=f"user{n}@example.org") for n in range(20)]
    deliver(inbound, dsn(message=delivered[0], recipient="user0@example.org"), to=verp_address(delivered[0]))
    domain.refresh_from_db()
    assert not domain.sending_paused  # 1 of 20 is 5%: at the limit, not over it (and 1 is below 2 bounces)

    deliver(inbound, dsn(message=delivered[1], recipient="user1@example.org"), to=verp_address(delivered[1]))
    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused, domain.paused_by) == (True, True, "safeguard")
    assert "bounce rate 10% (2 recipients in the last 20 sends) is over the 5% limit" in domain.pause_reason

    send = httpx.post(
        f"{web}/v1/send",
        headers={"Authorization": f"Bearer {full_key.secret}"},
        json={"from": "a@acme.example.com", "to": "b@example.org", "subject": "Hi", "text": "Hello"},
    )
    assert (send.status_code, send.json()["error"]["code"]) == (503, "SendingPaused")


def test_undeclared_8bit_mail_is_accepted_and_decoded(inbound, domain):
    raw = "From: Zoë <zoe@example.org>\r\nTo: help@acme.example.com\r\nSubject: Café ☕\r\n\r\nçà va\r\n".encode()
    with smtplib.SMTP("127.0.0.1", inbound, timeout=10) as smtp:
        smtp.sendmail("zoe@example.org", ["help@acme.example.com"], raw)
    stored = Message.objects.get()
    assert (stored.from_address, stored.subject, stored.text, bytes(stored.raw)) == (
        "Zoë <zoe@example.org>",
        "Café ☕",
        "çà va\r\n",
        raw,
    )


def test_a_transaction_takes_at_most_100_recipients(inbound, domain):
    recipients = [f"user{n}@acme.example.com" for n in range(101)]
    mail = plain_mail(sender="a@example.org", to="list@acme.example.com", subject="many", text="x")
    with smtplib.SMTP("127.0.0.1", inbound, timeout=10) as smtp:
        refused = smtp.sendmail("a@example.org", recipients, wire_bytes(mail))
    assert refused == {"user100@acme.example.com": (452, b"4.5.3 Too many recipients")}
    assert len(Message.objects.get().to) == 100


def test_mail_that_cannot_be_stored_gets_451_and_is_stored_when_resent(domain):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL table locks")
    # The server gives up on a statement after 300 ms; holding a lock on the message table makes storing fail.
    database_url = f"{current_database_url()}?options=-c%20statement_timeout%3D300"
    mail = plain_mail(sender="a@example.org", to="help@acme.example.com", subject="retry me", text="x")
    with inbound_smtp_server(DATABASE_URL=database_url) as port, smtplib.SMTP("127.0.0.1", port, timeout=10) as smtp:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("LOCK TABLE messaging_message IN ACCESS EXCLUSIVE MODE")
            with pytest.raises(smtplib.SMTPDataError) as refused:
                smtp.sendmail("a@example.org", ["help@acme.example.com"], wire_bytes(mail))
        assert refused.value.smtp_code == 451
        assert not Message.objects.exists()

        smtp.sendmail("a@example.org", ["help@acme.example.com"], wire_bytes(mail))
    assert Message.objects.get().subject == "retry me"


def test_mail_is_stored_after_the_database_dropped_the_servers_idle_connections(domain):
    if connection.vendor != "postgresql":
        pytest.skip("needs pg_terminate_backend")
    mail = plain_mail(sender="a@example.org", to="help@acme.example.com", subject="still there?", text="x")
    # Connections kept for a minute, as deployed, so the server reuses one the database has dropped.
    with inbound_smtp_server(DATABASE_CONN_MAX_AGE="60") as port:
        deliver(port, mail, to="help@acme.example.com")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        time.sleep(CONNECTION_CHECK_SECONDS)  # idle that long, a connection is checked before its next use

        deliver(port, mail, to="help@acme.example.com")
    assert Message.objects.count() == 2

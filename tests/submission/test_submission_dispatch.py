"""A message submitted over SMTP, stored by the service and dispatched in-process to the file outbox."""

import dkim
import pytest

from messaging.models import EventType, Message, Status, Suppression, SuppressionReason
from messaging.outbound.dispatch import dispatch_batch
from messaging.submission.services import Submitter, submission_accept
from tests.factories import ApiKeyFactory, DomainFactory, dkim_dnsfunc

pytestmark = pytest.mark.django_db

RAW = (
    b"From: Billing <billing@app.example.com>\r\n"
    b"To: Bob <bob@example.org>, header-only@example.org\r\n"
    b"Bcc: secret@example.net\r\n"
    b"Subject: Invoice\r\n"
    b"MIME-Version: 1.0\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\n"
    b"\r\n"
    b"Trailing spaces  \r\n\tand tabs stay as they were.\r\n"
)


@pytest.fixture
def outbox(settings, tmp_path):
    settings.EMAIL_URL = None
    settings.MAILSERVICE_OUTBOX_DIR = tmp_path
    return tmp_path


@pytest.fixture
def submitter() -> Submitter:
    return Submitter(api_key_id=ApiKeyFactory(domain=DomainFactory(name="app.example.com")).pk)


def submit(submitter: Submitter, recipients: list[str], raw: bytes = RAW) -> Message:
    return submission_accept(
        submitter=submitter, envelope_from="bounces@app.example.com", recipients=recipients, raw=raw
    )


def test_it_is_stored_with_the_headers_fields_and_its_envelope(submitter):
    message = submit(submitter, ["bob@example.org", "secret@example.net"])

    message.refresh_from_db()
    assert (message.status, message.from_address, message.subject) == (
        Status.ACCEPTED,
        "Billing <billing@app.example.com>",
        "Invoice",
    )
    assert message.to == ["Bob <bob@example.org>", "header-only@example.org"]
    assert message.envelope_recipients == ["bob@example.org", "secret@example.net"]
    assert bytes(message.raw) == RAW
    assert message.text == "Trailing spaces  \n\tand tabs stay as they were.\n"
    assert list(message.events.values_list("type", flat=True)) == [EventType.ACCEPTED]


def test_it_goes_out_byte_for_byte_without_bcc_with_a_message_id_and_a_signature(submitter, outbox):
    message = submit(submitter, ["bob@example.org", "secret@example.net"])
    dispatch_batch(public_id=message.public_id)

    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    data = (outbox / f"{message.public_id}.eml").read_bytes()
    head, body = data.split(b"\r\n\r\n", 1)
    assert body == RAW.split(b"\r\n\r\n", 1)[1]
    assert b"\r\nBcc:" not in head and b"secret@example.net" not in data
    assert f"\r\nMessage-ID: <{message.public_id}@app.example.com>\r\n".encode() in head
    assert b"\r\nDate: " in head
    assert dkim.verify(data, dnsfunc=dkim_dnsfunc(message.domain))


def test_the_envelope_decides_who_receives_it_and_suppressed_recipients_are_skipped(submitter, outbox):
    message = submit(submitter, ["bob@example.org", "secret@example.net"])
    Suppression.objects.create(domain=message.domain, address="secret@example.net", reason=SuppressionReason.MANUAL)
    # On the header's To but not in the envelope: never a recipient, so never suppressed either.
    Suppression.objects.create(
        domain=message.domain, address="header-only@example.org", reason=SuppressionReason.MANUAL
    )
    dispatch_batch(public_id=message.public_id)

    assert list(message.events.values_list("type", "recipient")) == [
        (EventType.ACCEPTED, ""),
        (EventType.SUPPRESSED, "secret@example.net"),
        (EventType.DELIVERED, ""),
    ]

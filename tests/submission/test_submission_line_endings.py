"""A bare CR or bare LF in submitted DATA is refused with 554 5.6.0, at the wire, and no relay ever
sees one: relays disagree on whether it ends a line or the data (SMTP smuggling, headers slipped
past the DKIM signature). Real processes: run_submission_smtp, a Celery worker, an aiosmtpd sink."""

import re
import uuid
from collections.abc import Iterator

import pytest

from messaging.models import Message
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import FAST_DISPATCH, celery_worker, smtp_sink, submission_smtp_server, wait_until
from tests.submission.raw_smtp import RawSession

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DOMAIN = "app.example.com"
QUEUE = f"test-submission-line-endings-{uuid.uuid4().hex}"
ENV = FAST_DISPATCH | {"MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH": "true", "CELERY_TASK_DEFAULT_QUEUE": QUEUE}
HEAD = f"From: billing@{DOMAIN}\r\nTo: bob@example.org\r\n".encode()
SMUGGLED = b"MAIL FROM:<ceo@victim.test>\r\nRCPT TO:<bob@example.org>\r\nDATA\r\nFrom: ceo@victim.test\r\n\r\npay\r\n"
_BARE = re.compile(rb"\r(?!\n)|(?<!\r)\n")


@pytest.fixture(scope="module")
def port(django_db_setup, django_db_blocker) -> Iterator[int]:
    with django_db_blocker.unblock(), submission_smtp_server(**ENV) as port:
        yield port


@pytest.fixture
def session(port: int) -> Iterator[RawSession]:
    key = ApiKeyFactory(domain=DomainFactory(name=DOMAIN))
    smtp = RawSession(port)
    assert smtp.auth_plain(key.secret).startswith(b"235")
    yield smtp
    smtp.close()


def submitted(smtp: RawSession, data: bytes) -> bytes:
    """One transaction with `data` sent as is (then the end of data); the reply to it."""
    assert smtp.send(f"MAIL FROM:<billing@{DOMAIN}>\r\n".encode()).startswith(b"250")
    assert smtp.send(b"RCPT TO:<bob@example.org>\r\n").startswith(b"250")
    assert smtp.send(b"DATA\r\n").startswith(b"354")
    return smtp.send(data + b".\r\n")


def test_a_bare_cr_smuggle_is_refused_and_never_reaches_the_relay(session):
    smuggle = HEAD + b"Subject: hello\r\n\r\nhello\r.\r" + SMUGGLED
    clean = HEAD + b"Subject: clean\r\n\r\nafter the smuggle\r\n"
    with smtp_sink() as sink, celery_worker(**ENV, EMAIL_URL=sink.url) as worker:
        refused = submitted(session, smuggle)
        assert submitted(session, clean).startswith(b"250")
        wait_until(lambda: len(sink.received) >= 1, timeout=60, message=f"delivery (worker log: {worker.log_path})")
        wait_until(lambda: not Message.objects.filter(status="accepted").exists(), timeout=30, message="dispatch")

    assert refused.startswith(b"554 5.6.0") and b"bare CR" in refused
    assert [b"after the smuggle" in received.data for received in sink.received] == [True]
    assert not any(_BARE.search(received.data) for received in sink.received)
    assert Message.objects.count() == 1


@pytest.mark.parametrize(
    "data",
    [
        HEAD + b"Subject: x\rFrom: ceo@victim.test\r\n\r\nbody\r\n",
        HEAD + b"Subject: x\nFrom: ceo@victim.test\r\n\r\nbody\r\n",
        HEAD + b"Subject: x\r\n\r\nhello\n.\n" + SMUGGLED,
        HEAD + b"Subject: x\r\n\r\na line ending with CR CR LF\r\r\n",
    ],
    ids=["CR in the header", "LF in the header", "LF smuggle in the body", "CR CR LF"],
)
def test_a_bare_cr_or_lf_anywhere_gets_554_and_nothing_is_stored(session, data):
    reply = submitted(session, data)

    assert reply.startswith(b"554 5.6.0") and b"every line must end with CRLF" in reply
    assert not Message.objects.exists()
    assert session.send(b"NOOP\r\n").startswith(b"250")  # the session goes on

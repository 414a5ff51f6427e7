"""SMTP submission end to end with real processes: run_submission_smtp (STARTTLS with a certificate made
here), gunicorn, a Celery worker and an aiosmtpd relay sink, on the test database."""

import email
import email.policy
import smtplib
import ssl
import threading
import time
import uuid
from collections.abc import Iterator
from email.message import EmailMessage

import dkim
import httpx
import pytest

from apikeys.models import Permission
from domains.models import Domain
from domains.services import domain_set_allowance, sending_pause
from messaging.models import Message
from tests.factories import ApiKeyFactory, DomainFactory, dkim_dnsfunc
from tests.harness import (
    FAST_DISPATCH,
    celery_worker,
    self_signed_certificate,
    smtp_sink,
    submission_smtp_server,
    wait_until,
    web_server,
)

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DOMAIN = "app.example.com"
MAX_BYTES = 200_000
QUEUE = f"test-submission-{uuid.uuid4().hex}"
ATTACHMENT = bytes(range(256)) * 40  # every byte value: nothing may be re-encoded on the way


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cert, key = self_signed_certificate(tmp_path_factory.mktemp("tls"))
    return str(cert), str(key)


@pytest.fixture(scope="module")
def client_tls(tls_files: tuple[str, str]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=tls_files[0])


def server_env(tls_files: tuple[str, str], **env: str) -> dict[str, str]:
    return FAST_DISPATCH | {
        "MAILSERVICE_TLS_CERT_FILE": tls_files[0],
        "MAILSERVICE_TLS_KEY_FILE": tls_files[1],
        "MAILSERVICE_SUBMISSION_MAX_BYTES": str(MAX_BYTES),
        "CELERY_TASK_DEFAULT_QUEUE": QUEUE,
        **env,
    }


@pytest.fixture(scope="module")
def port(django_db_setup, django_db_blocker, tls_files: tuple[str, str]) -> Iterator[int]:
    """One server for the module: what the tests create is committed, and the server reads it per session."""
    with django_db_blocker.unblock(), submission_smtp_server(**server_env(tls_files)) as port:
        yield port


@pytest.fixture
def domain() -> Domain:
    return DomainFactory(name=DOMAIN)


@pytest.fixture
def key(domain: Domain):
    return ApiKeyFactory(domain=domain)


def connect(port: int, context: ssl.SSLContext) -> smtplib.SMTP:
    smtp = smtplib.SMTP("127.0.0.1", port, timeout=30)
    smtp.starttls(context=context)
    smtp.ehlo()
    return smtp


def auth(smtp: smtplib.SMTP, mechanism: str, user: str, password: str) -> int:
    """One AUTH exchange (smtplib's login() would try every mechanism in turn); the reply code."""
    smtp.user, smtp.password = user, password
    method = {"PLAIN": smtp.auth_plain, "LOGIN": smtp.auth_login}[mechanism]
    try:
        return smtp.auth(mechanism, method)[0]
    except smtplib.SMTPAuthenticationError as refused:
        return refused.smtp_code


def authenticated(port: int, context: ssl.SSLContext, secret: str) -> smtplib.SMTP:
    smtp = connect(port, context)
    smtp.login("apikey", secret)
    return smtp


def message(*, sender: str = f"Billing <billing@{DOMAIN}>", **headers: str) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = sender
    mail["To"] = "Bob <bob@example.org>"
    mail["Subject"] = "Your invoice"
    for name, value in headers.items():
        mail[name.replace("_", "-")] = value
    mail.set_content("Please find your invoice attached.\n")
    mail.add_attachment(ATTACHMENT, maintype="application", subtype="octet-stream", filename="invoice.bin")
    return mail


def verifies(data: bytes, domain: Domain) -> bool:
    return dkim.verify(data, dnsfunc=dkim_dnsfunc(domain))


def test_a_submitted_message_is_listed_and_goes_out_as_submitted_signed_and_without_bcc(
    port, client_tls, tls_files, key, domain
):
    submitted = message(Cc="carol@example.org", Bcc="secret@example.net")
    envelope = ["bob@example.org", "carol@example.org", "secret@example.net"]
    env = server_env(tls_files)
    with (
        smtp_sink() as sink,
        web_server(workers=1, **env) as base_url,
        celery_worker(**env, EMAIL_URL=sink.url) as worker,
    ):
        with connect(port, client_tls) as smtp:
            assert auth(smtp, "PLAIN", "apikey", key.secret) == 235
            assert smtp.sendmail(f"bounces@{DOMAIN}", envelope, submitted.as_bytes(policy=email.policy.SMTP)) == {}

        headers = {"Authorization": f"Bearer {key.secret}"}
        [listed] = httpx.get(f"{base_url}/v1/messages", headers=headers).json()["data"]
        assert listed["from"] == f"Billing <billing@{DOMAIN}>"
        assert listed["to"] == ["Bob <bob@example.org>"]
        assert listed["subject"] == "Your invoice"

        def delivered() -> bool:
            return httpx.get(f"{base_url}/v1/messages/{listed['id']}", headers=headers).json()["status"] == "delivered"

        wait_until(delivered, timeout=60, interval=0.2, message=f"delivery (worker log: {worker.log_path})")
        read = httpx.get(f"{base_url}/v1/messages/{listed['id']}", headers=headers).json()
        assert read["text"] == "Please find your invoice attached.\n"

    [received] = sink.received
    assert received.mail_from == f"bounces@{DOMAIN}"
    assert sorted(received.rcpt_tos) == envelope
    assert b"secret@example.net" not in received.data
    assert verifies(received.data, domain)
    parsed = email.message_from_bytes(received.data, policy=email.policy.default)
    assert parsed["Bcc"] is None
    assert parsed["Cc"] == "carol@example.org"
    assert parsed["Message-ID"] == f"<{listed['id']}@{DOMAIN}>"
    assert parsed["Date"] is not None
    [attachment] = parsed.iter_attachments()
    assert attachment.get_filename() == "invoice.bin"
    assert attachment.get_content() == ATTACHMENT
    # Byte-faithful: the submitted body is exactly what went out.
    assert (
        received.data.split(b"\r\n\r\n", 1)[1] == submitted.as_bytes(policy=email.policy.SMTP).split(b"\r\n\r\n", 1)[1]
    )
    stored = Message.objects.get(public_id=listed["id"])
    assert list(stored.events.values_list("type", flat=True)) == ["accepted", "delivered"]


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_auth_takes_the_user_name_apikey_and_a_key_with_email_send(port, client_tls, key, mechanism):
    read_only = ApiKeyFactory(domain=key.domain, permissions=(Permission.READ,))
    for user, password, expected in [
        ("apikey", key.secret + "x", 535),
        ("apikey", "not-a-key", 535),
        ("someone", key.secret, 535),
        ("apikey", read_only.secret, 535),
        ("apikey", key.secret, 235),
    ]:
        with connect(port, client_tls) as smtp:
            assert auth(smtp, mechanism, user, password) == expected, (user, password)


def test_auth_is_refused_before_starttls(port, key):
    with smtplib.SMTP("127.0.0.1", port, timeout=30) as smtp:
        smtp.ehlo()
        assert "auth" not in smtp.esmtp_features
        code, _ = smtp.docmd("AUTH", "PLAIN " + "AGFwaWtleQB4")
        assert code in (530, 538)
        code, _ = smtp.docmd("MAIL", f"FROM:<billing@{DOMAIN}>")
        assert code == 530


def test_with_implicit_tls_auth_is_taken_from_the_first_command(tls_files, client_tls, key):
    with (
        submission_smtp_server(implicit_tls=True, **server_env(tls_files)) as port,
        smtplib.SMTP_SSL("127.0.0.1", port, context=client_tls, timeout=30) as smtp,
    ):
        smtp.ehlo()
        assert "starttls" not in smtp.esmtp_features
        assert auth(smtp, "LOGIN", "apikey", key.secret) == 235
        assert (
            smtp.sendmail(f"billing@{DOMAIN}", ["bob@example.org"], message().as_bytes(policy=email.policy.SMTP)) == {}
        )
    assert Message.objects.get().envelope_recipients == ["bob@example.org"]


def test_mail_before_auth_is_refused(port, client_tls, key):
    with connect(port, client_tls) as smtp:
        code, _ = smtp.mail(f"billing@{DOMAIN}")
        assert code == 530


@pytest.mark.parametrize(
    ("envelope_sender", "header_from"),
    [
        (f"billing@{DOMAIN}", "Mallory <ceo@bank.example>"),
        ("ceo@bank.example", f"billing@{DOMAIN}"),
        (f"billing@{DOMAIN}", f'"ceo@bank.example" <billing@{DOMAIN}>'),
    ],
    ids=["header From", "envelope sender", "another domain's address as the display name"],
)
def test_a_sender_off_the_keys_domain_is_refused_with_550(port, client_tls, key, envelope_sender, header_from):
    with authenticated(port, client_tls, key.secret) as smtp, pytest.raises(smtplib.SMTPException) as refused:
        smtp.sendmail(
            envelope_sender, ["bob@example.org"], message(sender=header_from).as_bytes(policy=email.policy.SMTP)
        )
    reply = str(refused.value)
    assert "550" in reply and "5.7.1" in reply
    assert not Message.objects.exists()


def test_an_unverified_domain_is_refused_with_550(port, client_tls, key, domain):
    Domain.objects.filter(pk=domain.pk).update(verified=False)
    with authenticated(port, client_tls, key.secret) as smtp:
        code, reply = smtp.mail(f"billing@{DOMAIN}")
    assert (code, reply[:5]) == (550, b"5.7.1")


@pytest.mark.parametrize("scope", ["domain", "global"])
def test_while_sending_is_paused_a_submission_gets_451_and_nothing_is_stored(port, client_tls, key, domain, scope):
    with authenticated(port, client_tls, key.secret) as smtp:
        smtp.mail(f"billing@{DOMAIN}")
        smtp.rcpt("bob@example.org")
        sending_pause(domain=domain if scope == "domain" else None, actor="test", reason="incident")
        code, reply = smtp.data(message().as_bytes(policy=email.policy.SMTP))
    assert (code, reply[:5]) == (451, b"4.3.2")
    assert not Message.objects.exists()


def test_a_used_up_allowance_gets_452(port, client_tls, key, domain):
    domain_set_allowance(domain=domain, allowance=0)
    with authenticated(port, client_tls, key.secret) as smtp:
        smtp.mail(f"billing@{DOMAIN}")
        smtp.rcpt("bob@example.org")
        code, reply = smtp.data(message().as_bytes(policy=email.policy.SMTP))
    assert (code, reply[:5]) == (452, b"4.3.1")
    assert not Message.objects.exists()


def test_the_51st_recipient_gets_452(port, client_tls, key):
    with authenticated(port, client_tls, key.secret) as smtp:
        smtp.mail(f"billing@{DOMAIN}")
        for n in range(50):
            assert smtp.rcpt(f"user{n}@example.org")[0] == 250
        code, reply = smtp.rcpt("user50@example.org")
    assert (code, reply[:5]) == (452, b"4.5.3")


def test_a_message_over_the_size_cap_gets_552(port, client_tls, key):
    big = message()
    big.add_attachment(b"x" * MAX_BYTES, maintype="application", subtype="octet-stream", filename="big.bin")
    with authenticated(port, client_tls, key.secret) as smtp:
        assert int(smtp.esmtp_features["size"]) == MAX_BYTES
        with pytest.raises(smtplib.SMTPSenderRefused) as declared:  # smtplib declares SIZE=…
            smtp.sendmail(f"billing@{DOMAIN}", ["bob@example.org"], big.as_bytes(policy=email.policy.SMTP))
        assert declared.value.smtp_code == 552
        smtp.rset()
        smtp.mail(f"billing@{DOMAIN}")  # not declared: refused once the data passes the cap
        smtp.rcpt("bob@example.org")
        code, _ = smtp.data(big.as_bytes(policy=email.policy.SMTP))
    assert code == 552
    assert not Message.objects.exists()


def test_a_message_whose_header_cannot_be_read_gets_554(port, client_tls, key):
    with authenticated(port, client_tls, key.secret) as smtp:
        smtp.mail(f"billing@{DOMAIN}")
        smtp.rcpt("bob@example.org")
        code, reply = smtp.data(b"From: billing@" + DOMAIN.encode() + b"\r\nthis is not a header\r\n\r\nbody\r\n")
    assert code == 554 and b"header line 2" in reply
    assert not Message.objects.exists()


def test_a_worker_killed_after_the_250_does_not_lose_the_message(port, client_tls, key, tls_files):
    env = server_env(tls_files)
    with smtp_sink() as sink, celery_worker(**env, EMAIL_URL=sink.url) as worker:
        hold = sink.behaviour.hold = threading.Event()
        with authenticated(port, client_tls, key.secret) as smtp:
            assert (
                smtp.sendmail(f"billing@{DOMAIN}", ["bob@example.org"], message().as_bytes(policy=email.policy.SMTP))
                == {}
            )
        wait_until(lambda: sink.in_data == 1, timeout=60, message=f"the worker to reach DATA ({worker.log_path})")

        worker.kill()
        sink.behaviour.hold = None
        hold.set()
        worker.start()
        stored = Message.objects.get()
        wait_until(lambda: Message.objects.get().status == "delivered", timeout=60, message="delivery")
        time.sleep(3)  # past another lease and many sweeps: nothing goes out a second time

    assert len(sink.received) == 1
    assert stored.events.filter(type="delivered").count() == 1


def test_failed_auth_and_api_requests_share_the_per_ip_limit(tls_files, client_tls, key):
    limit = 20
    # The failed-AUTH throttle (tests/submission/test_submission_abuse_limits.py) kept out of the way.
    limited = server_env(
        tls_files, MAILSERVICE_RATE_LIMIT=f"{limit}/h", MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_IP="100/h"
    )
    with submission_smtp_server(**limited) as port, web_server(workers=1, **limited) as base_url:
        # The web server's readiness probes were counted too: fewer than `limit` failures reach the limit.
        codes = []
        while 421 not in codes and len(codes) <= limit:
            with connect(port, client_tls) as smtp:
                codes.append(auth(smtp, "PLAIN", "apikey", "wrong"))
        with connect(port, client_tls) as smtp:
            assert auth(smtp, "PLAIN", "apikey", key.secret) == 421  # even the right key, until the window ends
        assert httpx.get(f"{base_url}/v1/messages").status_code == 429

    assert set(codes[:-1]) == {535} and codes[-1] == 421

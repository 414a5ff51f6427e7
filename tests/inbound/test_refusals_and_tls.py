"""Permanent refusals are permanent (5xx, one log line, no traceback), and STARTTLS with the configured certificate."""

import smtplib
import ssl
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from mailservice.tls import server_tls_context
from messaging.models import Message
from tests.harness import ROOT, child_env, child_server, self_signed_certificate, serves_smtp

INBOUND = [sys.executable, "manage.py", "run_inbound_smtp", "--host", "127.0.0.1", "--port", "{port}"]
DEEP_MIME = b"From: a@example.org\r\nTo: help@acme.example.com\r\nSubject: deep\r\n" + b"".join(
    b'Content-Type: multipart/mixed; boundary="b%d"\r\n\r\n--b%d\r\n' % (n, n) for n in range(3000)
)
ESCAPE_CHARSETS = (
    b"From: a@example.org\r\nTo: help@acme.example.com\r\nSubject: =?utf-7?Q?a+AAA-b?=\r\n"
    b"Content-Type: text/plain; charset=unicode_escape\r\n\r\n\\x00\\ud800 body\r\n"
)


@pytest.fixture(scope="module")
def inbound(django_db_setup) -> Iterator:
    with child_server(INBOUND, name="inbound", ready=serves_smtp, env={}) as child:
        yield child


def server_log(child) -> str:
    return (ROOT / "var" / f"inbound-{child.port}.log").read_text()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_mime_nested_3000_deep_is_refused_for_good_with_one_log_line(inbound, domain):
    with smtplib.SMTP("127.0.0.1", inbound.port, timeout=30) as smtp, pytest.raises(smtplib.SMTPDataError) as refused:
        smtp.sendmail("a@example.org", ["help@acme.example.com"], DEEP_MIME)
    assert (refused.value.smtp_code, refused.value.smtp_error[:5]) == (554, b"5.6.0")
    assert not Message.objects.exists()
    log = server_log(inbound)
    assert "Traceback" not in log
    assert log.count("refused") == 1 and "nested too deep" in log


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_nul_in_mail_from_or_rcpt_to_is_a_syntax_error(inbound, domain):
    with smtplib.SMTP("127.0.0.1", inbound.port, timeout=10) as smtp:
        smtp.ehlo()
        assert smtp.mail("a\x00b@example.org")[0] == 501
        assert smtp.mail("a@example.org")[0] == 250
        assert smtp.rcpt("help\x00@acme.example.com")[0] == 553
    assert "Traceback" not in server_log(inbound)


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_escape_charsets_are_decoded_into_storable_text(inbound, domain):
    with smtplib.SMTP("127.0.0.1", inbound.port, timeout=10) as smtp:
        assert smtp.sendmail("a@example.org", ["help@acme.example.com"], ESCAPE_CHARSETS) == {}
    stored = Message.objects.get()
    # utf-7 "+AAA-" is a NUL, which PostgreSQL cannot store; unicode_escape is no mail charset: read as UTF-8.
    assert (stored.subject, stored.text) == ("ab", "\\x00\\ud800 body\r\n")


def test_the_tls_context_is_off_when_unset_and_loads_the_configured_certificate(settings, tmp_path):
    assert server_tls_context() is None
    settings.MAILSERVICE_TLS_CERT_FILE, settings.MAILSERVICE_TLS_KEY_FILE = map(str, self_signed_certificate(tmp_path))
    assert isinstance(server_tls_context(), ssl.SSLContext)
    settings.MAILSERVICE_TLS_KEY_FILE = str(tmp_path / "missing.pem")
    with pytest.raises(ImproperlyConfigured, match="missing.pem"):
        server_tls_context()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_inbound_server_offers_starttls_with_the_configured_certificate(domain, tmp_path):
    cert_file, key_file = self_signed_certificate(tmp_path, host="mx.example.test")
    env = {"MAILSERVICE_TLS_CERT_FILE": str(cert_file), "MAILSERVICE_TLS_KEY_FILE": str(key_file)}
    client = ssl.create_default_context(cafile=str(cert_file))
    client.check_hostname = False
    with (
        child_server(INBOUND, name="inbound", ready=serves_smtp, env=env) as child,
        smtplib.SMTP("127.0.0.1", child.port, timeout=10) as smtp,
    ):
        assert smtp.ehlo()[0] == 250 and smtp.has_extn("starttls")
        assert smtp.starttls(context=client)[0] == 220
        assert smtp.sock.getpeercert()["subject"] == ((("commonName", "mx.example.test"),),)
        assert smtp.sendmail("a@example.org", ["help@acme.example.com"], b"Subject: tls\r\n\r\nx\r\n") == {}
    assert Message.objects.get().subject == "tls"


@pytest.mark.live
def test_a_missing_certificate_stops_start_up_with_one_line(tmp_path):
    env = child_env(
        MAILSERVICE_TLS_CERT_FILE=str(tmp_path / "nope.pem"), MAILSERVICE_TLS_KEY_FILE=str(tmp_path / "k.pem")
    )
    command = [part.replace("{port}", "2599") for part in INBOUND]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [
        f"CommandError: MAILSERVICE_TLS_CERT_FILE: no such file {tmp_path}/nope.pem"
    ]

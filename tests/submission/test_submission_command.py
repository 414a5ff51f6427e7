"""`manage.py run_submission_smtp` refuses to start, in one line, without the TLS it needs."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.harness import self_signed_certificate


@pytest.mark.parametrize(
    ("cert", "key", "complaint"),
    [
        ("", "", "set MAILSERVICE_TLS_CERT_FILE and MAILSERVICE_TLS_KEY_FILE"),
        (
            "/nonexistent/cert.pem",
            "/nonexistent/key.pem",
            "MAILSERVICE_TLS_CERT_FILE: no such file /nonexistent/cert.pem",
        ),
        ("/nonexistent/cert.pem", "", "must be set together"),
    ],
)
def test_no_usable_certificate_is_a_one_line_error(settings, cert, key, complaint):
    settings.MAILSERVICE_TLS_CERT_FILE, settings.MAILSERVICE_TLS_KEY_FILE = cert or None, key or None
    with pytest.raises(CommandError, match=complaint) as refused:
        call_command("run_submission_smtp", "--port", "2587")
    assert "\n" not in str(refused.value)


def test_a_key_that_does_not_match_the_certificate_is_refused(settings, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cert, _ = self_signed_certificate(tmp_path / "a")
    _, other_key = self_signed_certificate(tmp_path / "b")
    settings.MAILSERVICE_TLS_CERT_FILE, settings.MAILSERVICE_TLS_KEY_FILE = str(cert), str(other_key)
    with pytest.raises(CommandError, match="cannot load the TLS certificate"):
        call_command("run_submission_smtp", "--port", "2587")


def test_plaintext_auth_is_refused_off_loopback(settings):
    settings.MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH = True
    with pytest.raises(CommandError, match="plaintext AUTH is only for a server on loopback, not 0.0.0.0"):
        call_command("run_submission_smtp", "--host", "0.0.0.0", "--port", "2587")  # noqa: S104 - the refused case


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_fresh_development_checkout_serves_starttls_with_a_certificate_it_makes(tmp_path):
    """`make submission` on a fresh checkout (.env's DEBUG=true, no certificate configured): STARTTLS with a
    self-signed certificate made in var/tls/, and AUTH over it."""
    import smtplib
    import ssl

    from apikeys.models import Permission
    from tests.factories import ApiKeyFactory, DomainFactory
    from tests.harness import BIN, child_env
    from tests.harness.servers import child_server
    from tests.harness.smtp import serves_smtp

    key = ApiKeyFactory(domain=DomainFactory(name="dev.example.com"), permissions=(Permission.SEND,))
    env = child_env(DEBUG="true", MAILSERVICE_VAR_DIR=str(tmp_path), REDIS_URL="")
    command = [str(BIN / "python"), "manage.py", "run_submission_smtp", "--port", "{port}"]
    with child_server(command, name="submission-dev", ready=serves_smtp, env=env) as server:
        client_context = ssl.create_default_context(cafile=str(tmp_path / "tls" / "dev-cert.pem"))
        with smtplib.SMTP("localhost", server.port, timeout=10) as smtp:
            smtp.starttls(context=client_context)  # verified against the certificate it made, for localhost
            assert smtp.login("apikey", key.secret)[0] == 235

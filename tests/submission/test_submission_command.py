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

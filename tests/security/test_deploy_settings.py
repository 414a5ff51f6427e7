import subprocess
import sys

import pytest

from tests.harness import ROOT, child_env

pytestmark = pytest.mark.live  # each test runs manage.py

# The production environment docs/configuration.md documents (behind a TLS-terminating proxy).
PRODUCTION_ENV = {
    "DEBUG": "false",
    "SECRET_KEY": "k" * 20 + "production-like-secret-with-enough-entropy-0123456789",
    "ALLOWED_HOSTS": "mail.example.com",
    "MAILSERVICE_TRUSTED_PROXIES": "10.0.0.0/8",
    "SECURE_SSL_REDIRECT": "true",
    "SECURE_HSTS_SECONDS": "31536000",
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": "true",
    "SECURE_HSTS_PRELOAD": "true",
    "MAILSERVICE_ENCRYPTION_KEYS": "0x7s_HBxXxPjbOnBu0RuW8tU5u7oCEjV7_2SAxxHUmU=",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True)


def test_check_deploy_passes_with_the_documented_production_settings(db):
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=child_env(**PRODUCTION_ENV))

    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key(db):
    env = child_env(**PRODUCTION_ENV)
    del env["SECRET_KEY"]

    result = _manage("check", env=env)

    assert result.returncode != 0
    assert "SECRET_KEY must be set" in result.stderr


def test_check_deploy_fails_without_encryption_keys(db):
    env = child_env(**PRODUCTION_ENV)
    del env["MAILSERVICE_ENCRYPTION_KEYS"]

    result = _manage("check", "--deploy", env=env)

    assert result.returncode != 0
    assert "mailservice.E001" in result.stderr and "MAILSERVICE_ENCRYPTION_KEYS is not set" in result.stderr

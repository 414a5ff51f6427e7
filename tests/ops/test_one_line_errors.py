"""A bad setting or an unreachable database stops a process with one line naming it, not a traceback
(config/startup.py), under DEBUG=true too; `--traceback` shows the traceback."""

import subprocess

import pytest

from tests.harness.env import child_env
from tests.harness.process import BIN, ROOT, free_port

pytestmark = pytest.mark.live  # each test runs a command or a server

BAD_EMAIL_URL = "smtp://relay.example?verfy=1"
WHAT = "ImproperlyConfigured: EMAIL_URL: unknown option(s) verfy"


def _run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=ROOT, env=child_env(**env), capture_output=True, text=True, timeout=60, check=False
    )


def _lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("program", "command"),
    [
        ("manage.py", [str(BIN / "python"), "manage.py", "check"]),
        ("manage.py", [str(BIN / "python"), "manage.py", "create_domain", "one.example"]),
        ("celery", [str(BIN / "celery"), "-A", "config", "worker", "--pool", "solo"]),
        ("celery", [str(BIN / "celery"), "-A", "config", "beat"]),
    ],
)
def test_a_bad_setting_is_one_line(program, command):
    result = _run(command, EMAIL_URL=BAD_EMAIL_URL)
    assert result.returncode == 1
    assert _lines(result) == [f"{program}: {WHAT} (known: starttls, verify, ca_file)"], _lines(result)


@pytest.mark.django_db
def test_the_web_server_names_the_bad_setting_and_stops():
    port = free_port()
    command = [str(BIN / "gunicorn"), "config.asgi", "--worker-class", "config.workers.WebWorker"]
    result = _run([*command, "--bind", f"127.0.0.1:{port}"], EMAIL_URL=BAD_EMAIL_URL)
    assert result.returncode != 0
    assert f"web: {WHAT}" in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_an_unreachable_database_is_one_line():
    port = free_port()  # nothing listens there
    result = _run(
        [str(BIN / "python"), "manage.py", "create_domain", "one.example"],
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{port}/mailservice",
    )
    assert result.returncode == 1
    [line] = _lines(result)
    assert line.startswith("manage.py: OperationalError: ") and "Connection refused" in line


@pytest.mark.django_db
@pytest.mark.parametrize("debug", ["false", "true"])
@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("MAILSERVICE_RATE_LIMIT", "lots", "a rate like 120/m or 5/10s"),
        ("MAILSERVICE_METRICS_FAILURE_RATE", "10/0s", "a rate like 120/m or 5/10s"),
        ("MAILSERVICE_SOFT_BOUNCE_LIMIT", "many", "an integer"),
        ("MAILSERVICE_BOUNCE_RATE_LIMIT", "5%", "a number"),
        ("MAILSERVICE_SUBMISSION_AUTH_FAILURES_PER_IP", "ten", "a rate like 120/m or 5/10s"),
        ("REDIS_URL", "localhost:6379", "a URL redis://host or rediss://host or unix:///path/to.sock"),
        ("MAILSERVICE_API_URL", "mail.example.com", "a URL https://host or http://host"),
        ("MAILSERVICE_TLSRPT_FROM", "Reports <tls@example.com>", "a bare address like reports@example.com"),
        ("MAILSERVICE_HELO_NAME", "mail_1.example.com", "a host name like mail.example.com"),
        ("LOG_LEVEL", "verbose", "one of DEBUG, INFO, WARNING, ERROR, CRITICAL"),
    ],
)
def test_a_setting_that_cannot_be_read_stops_start_up_in_one_line_under_debug_too(name, value, what, debug):
    # A rate limit that could not be read used to leave the service unlimited, and DEBUG showed tracebacks.
    result = _run([str(BIN / "python"), "manage.py", "check"], **{name: value, "DEBUG": debug})
    assert result.returncode == 1
    [line] = _lines(result)
    assert line.startswith(f"manage.py: ImproperlyConfigured: {name} must be {what}") and repr(value) in line, line


@pytest.mark.django_db
@pytest.mark.parametrize("debug", ["false", "true"])
@pytest.mark.parametrize(
    ("name", "value", "what"),
    [
        ("MAILSERVICE_TRUSTED_PROXIES", "10.0.0.0/8,nginx", "'nginx' is not an IP address or network"),
        ("MAILSERVICE_SOURCE_ADDRESSES", "192.0.2.1,mx1", "'mx1' is not an IPv4 or IPv6 address"),
    ],
)
def test_a_list_with_one_bad_entry_stops_start_up_naming_the_entry(name, value, what, debug):
    # A proxy list that could not be read used to fail every request that came through a proxy, as a 500.
    result = _run([str(BIN / "python"), "manage.py", "check"], **{name: value, "DEBUG": debug})
    assert result.returncode == 1
    [line] = _lines(result)
    assert line.startswith(f"manage.py: ImproperlyConfigured: {name}: {what}"), line


def test_a_password_in_a_bad_url_is_not_shown():
    result = _run([str(BIN / "python"), "manage.py", "check"], REDIS_URL="redis://:hunter2@/0")
    assert result.returncode == 1
    [line] = _lines(result)
    assert "REDIS_URL must be a URL" in line and "hunter2" not in line and "got 'redis://:***@/0'" in line, line


@pytest.mark.django_db
def test_traceback_on_request():
    result = _run([str(BIN / "python"), "manage.py", "check", "--traceback"], EMAIL_URL=BAD_EMAIL_URL)
    assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr


@pytest.mark.parametrize(
    ("name", "value", "line"),
    [
        ("MAILSERVICE_REPORT_MAX_RECORDS", "0", "must be an integer of at least 1, got 0"),
        ("MAILSERVICE_REPORT_DAILY_ROWS", "-5", "must be an integer of at least 1, got -5"),
        ("MAILSERVICE_REPORT_MAX_AGE_DAYS", "sixty", "must be an integer, got 'sixty'"),
    ],
)
def test_the_report_budgets_are_checked_at_start_up(name, value, line):
    result = _run([str(BIN / "python"), "manage.py", "check"], **{name: value})
    assert result.returncode == 1
    assert _lines(result) == [f"manage.py: ImproperlyConfigured: {name} {line}"], _lines(result)

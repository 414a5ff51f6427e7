"""The JS client's suites, run by pytest so one command runs everything.

The unit and vector tests need nothing (the live file skips itself without a server); the live
tests get a real gunicorn on the test database and the domains and keys made here, through the
environment of `node --test`.
"""

import os
import re
import shutil
import subprocess

import pytest

from domains.services import sending_pause
from messaging.models import Message
from tests.clients.outage import unreachable_database_url
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import ROOT, web_server

JS = ROOT / "clients" / "js"
STYLES = 5  # native, sesv2, postmark, resend, sendgrid


def run_node(*args: str, env: dict[str, str] | None = None) -> str:
    node = shutil.which("node")
    assert node, "node (18+) must be on PATH to test the JS client"
    result = subprocess.run(
        [node, "--test", *args], cwd=JS, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
    return result.stdout


def count(summary: str, output: str) -> int:
    return int(re.search(rf"^# {summary} (\d+)$", output, re.MULTILINE).group(1))


@pytest.mark.live
def test_the_js_unit_and_vector_tests_pass():
    output = run_node(*sorted(str(path) for path in JS.glob("test/*.test.mjs")))
    assert count("pass", output) > 100
    assert count("fail", output) == 0


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_every_js_style_against_a_real_server():
    domain = DomainFactory(name="js.example.com")
    key = ApiKeyFactory(domain=domain)
    paused_domain = DomainFactory(name="paused-js.example.com")
    paused_key = ApiKeyFactory(domain=paused_domain)
    sending_pause(domain=paused_domain, actor="test", reason="live test of the paused error")

    with web_server() as base_url, web_server(DATABASE_URL=unreachable_database_url()) as down_url:
        output = run_node(
            "test/live.test.mjs",
            env={
                "LIVE_BASE_URL": base_url,
                "LIVE_KEY": key.secret,
                "LIVE_DOMAIN": domain.name,
                "LIVE_PAUSED_KEY": paused_key.secret,
                "LIVE_PAUSED_DOMAIN": paused_domain.name,
                "LIVE_DOWN_BASE_URL": down_url,
            },
        )

    assert count("pass", output) == 2 * STYLES + 2
    assert count("skipped", output) == 0
    # The Message resource has no cc; the stored rows show each style carried it through.
    sent = Message.objects.filter(domain=domain)
    assert sent.count() == STYLES
    assert all(message.cc == ["c@example.org"] for message in sent)
    assert not Message.objects.filter(domain=paused_domain).exists()


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_idempotent_sends_through_the_js_clients():
    domain = DomainFactory(name="js.example.com")
    key = ApiKeyFactory(domain=domain)
    with web_server() as base_url:
        output = run_node(
            "test/idempotency.live.test.mjs",
            env={"LIVE_BASE_URL": base_url, "LIVE_KEY": key.secret, "LIVE_DOMAIN": domain.name},
        )

    assert (count("pass", output), count("skipped", output)) == (3, 0)
    assert Message.objects.filter(domain=domain).count() == 2 + 3  # two single sends, one batch of three


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_js_native_client_manages_suppressions_and_reads_events():
    from apikeys.models import Permission

    domain = DomainFactory(name="js.example.com")
    key = ApiKeyFactory(domain=domain, permissions=tuple(Permission.values))

    with web_server() as base_url:
        output = run_node(
            "test/appview.live.test.mjs",
            env={"LIVE_APPVIEW_BASE_URL": base_url, "LIVE_APPVIEW_KEY": key.secret, "LIVE_APPVIEW_DOMAIN": domain.name},
        )

    assert count("pass", output) == 3, output[-3000:]
    assert count("fail", output) == 0

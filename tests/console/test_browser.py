"""The operator's whole round trip, in headless Chromium against a real gunicorn.

Debian's chromium driven by Playwright (no browser download). Screenshots of the main pages
land in var/screenshots/. With CI set, a missing Chromium fails the test instead of skipping it.
"""

import os
import re
import subprocess
from pathlib import Path

import httpx
import pytest
from django.contrib.auth.models import User

from tests.factories import DomainFactory, TemplateFactory, TemplateVersionFactory
from tests.harness import BIN, ROOT, child_env, web_server

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = ROOT / "var" / "screenshots"
PASSWORD = "a-long-operator-passphrase"


@pytest.fixture
def browser_page(monkeypatch):
    if not CHROMIUM.exists():
        message = f"Chromium not found at {CHROMIUM} (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; the test's own ORM calls are still synchronous.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.set_default_timeout(15_000)
        yield page
        browser.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def send(base_url: str, secret: str) -> httpx.Response:
    return httpx.post(
        f"{base_url}/v1/send",
        headers={"Authorization": f"Bearer {secret}"},
        json={
            "from": "Shop <orders@shop.example.com>",
            "to": "buyer@example.org",
            "subject": "Order 1001",
            "text": "Thanks!",
        },
        timeout=10,
    )


def create_superuser() -> None:
    """The way in of docs/operating.md: `manage.py createsuperuser`, here non-interactive, on the test database."""
    subprocess.run(
        [
            str(BIN / "python"),
            "manage.py",
            "createsuperuser",
            "--noinput",
            "--username",
            "operator",
            "--email",
            "ops@example.com",
        ],
        cwd=ROOT,
        env=child_env(DJANGO_SUPERUSER_PASSWORD=PASSWORD),
        check=True,
        capture_output=True,
    )
    assert User.objects.get(username="operator").is_superuser


def log_in(page, base_url: str) -> None:
    page.goto(f"{base_url}/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_selector("text=Operations")


def test_an_operator_runs_the_service_from_the_console(browser_page):
    page = browser_page
    create_superuser()
    server_env = {
        "SECURE_COOKIES": "false",  # plain http on loopback
        "MAILSERVICE_SPF_INCLUDE": "spf.mailservice.test",
        "MAILSERVICE_INBOUND_HOST": "mx.mailservice.test",
        "MAILSERVICE_RETURN_PATH_DOMAIN": "bounces.mailservice.test",
    }
    with web_server(**server_env) as base_url:
        log_in(page, base_url)
        assert page.locator("link[href$='admin/css/base.css']").count() == 1
        assert httpx.get(base_url + page.locator("link[href$='admin/css/base.css']").get_attribute("href")).is_success
        shot(page, "01-index")

        # Create a domain and read its DNS records.
        page.goto(f"{base_url}/admin/domains/domain/add/")
        page.fill("#id_name", "Shop.Example.com")
        page.click("input[name=_save]")
        page.click("text=shop.example.com")
        records = page.locator("#dns-records")
        for expected in (
            "_mailservice.shop.example.com",
            "mail._domainkey.shop.example.com",
            "v=spf1 include:spf.mailservice.test ~all",
            "10 mx.mailservice.test.",
        ):
            assert expected in records.inner_text()
        assert "mailservice-verification=" in records.inner_text()
        shot(page, "02-domain-records")

        # Mark it verified (operator override).
        page.click("#mark-verified")
        assert "marked verified by operator" in page.locator("ul.messagelist").inner_text()
        assert "operator (operator override)" in page.locator(".field-verification").inner_text()

        # Create an API key and read the secret, once.
        page.goto(f"{base_url}/admin/apikeys/apikey/add/")
        page.select_option("#id_domain", label="shop.example.com")
        page.fill("#id_name", "web shop")
        page.click("input[name=_save]")
        secret = page.locator("#api-key-secret").input_value()
        assert re.fullmatch(r"ms_[A-Za-z0-9]{12}_[A-Za-z0-9]{40}", secret)
        shot(page, "03-api-key-created")
        page.click("text=Done, go to the key")
        page.wait_for_url(re.compile(r"/change/"))
        assert secret not in page.content()
        page.goto(f"{base_url}/admin/apikeys/apikey/")
        assert secret not in page.content() and "web shop" in page.content()
        shot(page, "04-api-keys")

        # Send with it through the HTTP API, then find the message in the console.
        sent = send(base_url, secret)
        assert sent.status_code == 200, sent.text
        message_id = sent.json()["id"]
        page.goto(f"{base_url}/admin/messaging/message/")
        page.fill("#searchbar", message_id)
        page.press("#searchbar", "Enter")
        page.wait_for_url(re.compile(r"\?q=msg_"))
        shot(page, "05-messages")
        page.click(f"text={message_id}")
        page.wait_for_url(re.compile(r"/change/"))
        detail = page.content()
        assert "Order 1001" in detail and "buyer@example.org" in detail and "Thanks!" in detail
        assert "Accepted" in page.locator("#timeline").inner_text()
        shot(page, "06-message-detail")

        # Pause the domain: the API answers 503; resume: it sends again.
        page.goto(f"{base_url}/admin/domains/domain/")
        shot(page, "07-domains")
        page.click("text=shop.example.com")
        page.click("#pause-sending")
        page.fill("#id_reason", "checking a complaint")
        shot(page, "08-pause")
        page.click("#confirm-pause")
        shot(page, "09-domain-paused")
        assert "checking a complaint" in page.locator(".field-sending").inner_text()
        paused = send(base_url, secret)
        assert paused.status_code == 503 and paused.json()["error"]["code"] == "SendingPaused"

        page.click("#resume-sending")
        page.click("#confirm-resume")
        assert "Sending resumed for shop.example.com" in page.locator("ul.messagelist").inner_text()
        assert send(base_url, secret).status_code == 200


def test_a_template_preview_renders_side_by_side_and_its_scripts_never_run(browser_page):
    page = browser_page
    create_superuser()
    version = TemplateVersionFactory(
        template=TemplateFactory(domain=DomainFactory(name="shop.example.com"), slug="receipt"),
        subject="Receipt for {{ name }}",
        text="Hello {{ name }}, thanks for your order.",
        html="<h1>Hello {{ name }}</h1><script>parent.document.title = 'escaped'; document.body.append('ran')</script>",
        published=False,
    )
    with web_server(SECURE_COOKIES="false") as base_url:
        log_in(page, base_url)
        page.goto(f"{base_url}/admin/templates_app/templateversion/{version.pk}/change/")
        page.fill("#id_variables", '{"name": "Ada"}')
        page.click("text=Render preview")
        page.wait_for_url(re.compile(r"variables="))
        assert "Hello Ada, thanks for your order." in page.locator("#preview-text").inner_text()
        frame = page.frame_locator("iframe.ms-html")
        assert frame.locator("h1").inner_text() == "Hello Ada"
        assert "ran" not in frame.locator("body").inner_text()
        assert "escaped" not in page.title()
        shot(page, "10-template-preview")

        page.click("#publish")
        page.wait_for_selector("#unpublish")
        assert "published" in page.locator("ul.messagelist").inner_text()

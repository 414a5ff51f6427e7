"""The dashboard in headless Chromium, on data from a real run (web, worker, relay), and the lists at 1366 px.

Its screenshot (var/screenshots/dashboard.png) is docs/images/dashboard.png (docs/operating.md), copied by hand
after a run, so the suite never rewrites a tracked file.
"""

import random
import uuid
from datetime import timedelta

import httpx
import pytest
from django.utils import timezone

from messaging.aggregates import ROLLUP_LAG, status_counts_rollup
from messaging.models import Message, MessageEvent, Status
from tests.console.test_browser import SCREENSHOTS, browser_page, create_superuser, log_in  # noqa: F401
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import FAST_DISPATCH, celery_worker, smtp_sink, wait_until, web_server

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

WIDTH = 1366  # a common laptop screen: every console page must fit it without a horizontal scroll bar


def _run_traffic(base_url: str, keys: dict[str, str], sink) -> None:
    """Real sends through the API, delivered or bounced by the relay."""
    sink.behaviour.rejected_rcpts = {"gone@example.org": "550 5.1.1 no such user"}
    for name, secret in keys.items():
        for n in range(8 if name.startswith("shop") else 4):
            recipient = "gone@example.org" if n % 4 == 3 else f"buyer{n}@example.org"
            body = {"from": f"Orders <orders@{name}>", "to": recipient, "subject": f"Order {n}", "text": "Thanks!"}
            sent = httpx.post(f"{base_url}/v1/send", headers={"Authorization": f"Bearer {secret}"}, json=body)
            assert sent.status_code == 200, sent.text
    wait_until(
        lambda: not Message.objects.filter(status=Status.ACCEPTED).exists(),
        timeout=60,
        interval=0.3,
        message="dispatch",
    )


def _backdate_a_fortnight() -> None:
    """Spread the run's events over the last 14 days (the run itself lasts seconds), so both charts have a shape."""
    rng = random.Random(18)
    now = timezone.now()
    for event in MessageEvent.objects.all():
        hours_ago = rng.choice([0, 1, 2, 3, 5, 8, 13, 20, 30, 50, 80, 120, 200, 300])
        MessageEvent.objects.filter(pk=event.pk).update(created_at=now - timedelta(hours=hours_ago, minutes=5))


def _fits(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def test_the_dashboard_charts_a_real_run_and_the_console_fits_1366_px(browser_page):  # noqa: F811 - the fixture
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 900})
    create_superuser()
    keys = {
        name: ApiKeyFactory(domain=DomainFactory(name=name)).secret for name in ("shop.example.com", "news.example.org")
    }
    with smtp_sink() as sink:
        env = FAST_DISPATCH | {"EMAIL_URL": sink.url, "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}"}
        with web_server(workers=1, SECURE_COOKIES="false", **env) as base_url, celery_worker(**env):
            _run_traffic(base_url, keys, sink)
            _backdate_a_fortnight()
            status_counts_rollup(now=timezone.now() + ROLLUP_LAG)

            log_in(page, base_url)
            dashboard = page.locator("#ms-dashboard")
            assert dashboard.locator("svg.ms-chart").count() == 2 + 2 * 2
            assert page.locator("#ms-domains tr[data-domain='shop.example.com']").is_visible()
            assert "Queued0" in dashboard.locator("#ms-queue-depth").inner_text().replace("\n", "")
            assert dashboard.locator("svg.ms-rate").count() == 4
            assert _fits(page)
            page.screenshot(path=str(SCREENSHOTS / "dashboard.png"), full_page=True)
            for path in ("messaging/message/", "apikeys/apikey/", "domains/domain/", "templates_app/template/"):
                page.goto(f"{base_url}/admin/{path}")
                assert _fits(page), path

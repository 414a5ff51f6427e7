"""The console's busiest lists keep their key columns in view on a 1280-pixel-wide screen, with realistic
long values (a reviewer at 1400 px saw the message list's To and Subject, and the webhook deliveries'
Status, Attempts and Code, pushed out to the right)."""

import pytest

from messaging.models import EventType, MessageEvent
from tests.console.test_browser import browser_page, create_superuser, log_in, shot  # noqa: F401 - the fixture
from tests.factories import DomainFactory, MessageFactory
from tests.harness import web_server
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

WIDTH = 1280
LONG = "a-rather-long-local-part.with.dots+and-a-tag"
LEAST_PIXELS = 80  # a status code or an attempt count; addresses and subjects get more


def _seed() -> None:
    domain = DomainFactory(name="notifications.shop-with-a-long-name.example.com")
    endpoint = WebhookEndpoint.objects.create(
        domain=domain, url=f"https://hooks.customer-application.example.com/mail/events/{'x' * 60}"
    )
    for index in range(5):
        message = MessageFactory(
            domain=domain,
            from_address=f"Order confirmations <{LONG}@{domain.name}>",
            to=[f"{LONG}{index}@customer-mailbox-provider.example.org", f"second.{LONG}@example.net"],
            subject="Your order 100200300 has shipped and will arrive on Thursday between 9 and 12 " * 2,
        )
        event = MessageEvent.objects.create(message=message, type=EventType.DELIVERED, detail="250 2.0.0 OK")
        WebhookDelivery.objects.create(
            endpoint=endpoint,
            message_event=event,
            subject_created_at=event.created_at,
            event_id=f"evt_{'0123456789abcdef' * 2}{index}",
            event_type="email.delivered",
            payload="{}",
            status=DeliveryStatus.FAILED,
            attempts=7,
            last_status_code=503,
            last_latency_ms=10000,
        )


def _visible_headers(page) -> dict[str, bool]:
    """Each column header's text: whether it lies wholly inside the window (no scrolling needed), is wide
    enough to read (a column squeezed to a few characters hides its values as surely) and shows its whole
    name (a reviewer read "SENT TODAY / ALLOWANC" on the domain list)."""
    return page.evaluate(
        r"""([width, least]) => Object.fromEntries([...document.querySelectorAll('#result_list thead th')]
            .filter(th => th.innerText.trim())
            .map(th => [th.innerText.trim().split(/\s+/).join(" "), th.getBoundingClientRect(),
                        th.querySelector(".text") || th])
            .map(([name, box, text]) => [name, box.right <= width && box.width >= least
                && text.scrollWidth <= text.clientWidth + 1]))""",
        [WIDTH, LEAST_PIXELS],
    )


@pytest.mark.parametrize(
    ("path", "key_columns"),
    [
        ("/admin/messaging/message/", ["PUBLIC ID", "DIRECTION / STATUS", "TO", "SUBJECT"]),
        ("/admin/webhooks/webhookdelivery/", ["STATUS", "ATTEMPTS", "LAST STATUS CODE"]),
        ("/admin/domains/domain/", ["NAME", "SENT TODAY / ALLOWANCE", "BOUNCES (30 D)", "COMPLAINTS (30 D)"]),
    ],
)
def test_key_columns_are_in_view_at_1280_pixels(browser_page, path, key_columns):  # noqa: F811 - the fixture
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 900})
    create_superuser()
    _seed()
    with web_server(SECURE_COOKIES="false") as base_url:
        log_in(page, base_url)
        page.goto(base_url + path)
        headers = _visible_headers(page)
        shot(page, f"list-{path.strip('/').replace('/', '-')}-{WIDTH}")
    hidden = [name for name in key_columns if not headers.get(name)]
    assert not hidden, f"out of view at {WIDTH} px: {hidden}; headers: {headers}"

"""What the console shows reads right in Chromium: links readable against their background (WCAG AA), charts
that name what they plot, and the service's name on the pages of its own views."""

import re

import pytest

from tests.console.test_browser import browser_page, create_superuser, log_in, shot  # noqa: F401 - the fixture
from tests.factories import DomainFactory
from tests.harness import web_server

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

AA_NORMAL_TEXT = 4.5  # WCAG 2.1, 1.4.3: the least contrast ratio for text under 18 pt


def _luminance(css_color: str) -> float:
    red, green, blue = (int(part) / 255 for part in re.findall(r"\d+", css_color)[:3])

    def linear(channel: float) -> float:
        return channel / 12.92 if channel <= 0.03928 else ((channel + 0.055) / 1.055) ** 2.4

    return 0.2126 * linear(red) + 0.7152 * linear(green) + 0.0722 * linear(blue)


def contrast(foreground: str, background: str) -> float:
    lighter, darker = sorted((_luminance(foreground), _luminance(background)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


# An element's text colour and the first opaque background behind it.
COLOURS = """element => {
    let node = element, background = "rgba(0, 0, 0, 0)";
    while (node && /rgba\\(.*, 0\\)|transparent/.test(background)) {
        background = getComputedStyle(node).backgroundColor;
        node = node.parentElement;
    }
    return [getComputedStyle(element).color, background];
}"""


def test_the_destinations_caption_link_is_readable_and_the_page_names_the_service(browser_page):  # noqa: F811
    page = browser_page
    create_superuser()
    with web_server(SECURE_COOKIES="false", EMAIL_URL="mx://") as base_url:
        log_in(page, base_url)
        page.goto(f"{base_url}/admin/domains/domain/destinations/")
        link = page.locator("#ms-sources caption a")
        foreground, background = link.evaluate(COLOURS)
        header = page.locator("#site-name").inner_text()
        shot(page, "destinations-caption")

    # A reviewer measured rgb(65,120,147) on rgb(65,118,144): the link was invisible.
    assert contrast(foreground, background) >= AA_NORMAL_TEXT, (foreground, background)
    assert header == "Mail service console"


def test_the_domain_pages_charts_show_their_title_unit_and_legend(browser_page):  # noqa: F811
    page = browser_page
    create_superuser()
    domain = DomainFactory(name="charts.example.com")
    with web_server(SECURE_COOKIES="false") as base_url:
        log_in(page, base_url)
        page.goto(f"{base_url}/admin/domains/domain/{domain.pk}/change/")
        charts = page.locator("svg.ms-chart")
        # SVG text has no innerText: its textContent is what is drawn.
        drawn = [chart.locator("text").evaluate_all("texts => texts.map(t => t.textContent)") for chart in charts.all()]
        shot(page, "domain-charts")

    assert len(drawn) == 2
    volume, rate = drawn
    assert volume[:2] == ["DMARC-reported messages per day", "messages a day"] and "dmarc pass" in volume
    assert rate[:2] == ["DMARC pass rate per day (%)", "% of the day's messages"] and "pass rate %" in rate

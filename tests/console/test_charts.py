"""The console's SVG charts say what they show: a visible title and unit, a legend, and gaps where no data is."""

import html
import re

from mailservice.charts import REPORT_COLORS, line_chart

LABELS = ["12-01", "12-02", "12-03", "12-04", "12-05"]
RATE = "pass rate %"


def chart(series: dict[str, list[int | None]]) -> str:
    colors = {**REPORT_COLORS, "other": "#000000"}
    unit = "% of the day's messages"
    return str(line_chart(title="DMARC pass rate", unit=unit, labels=LABELS, series=series, colors=colors))


def test_a_day_without_data_is_a_gap_not_a_zero():
    svg = chart({RATE: [90, 80, None, None, 100]})

    # Two runs: the first two days as a line, the last day alone; nothing drawn for the gap.
    assert len(re.findall(r"<polyline", svg)) == 2
    assert re.findall(r"<title>(12-0\d) pass rate %: (\d+)</title>", svg) == [
        ("12-01", "90"),
        ("12-02", "80"),
        ("12-05", "100"),
    ]


def test_a_real_zero_is_drawn():
    svg = chart({RATE: [0, 0, 0, 0, 0]})
    assert len(re.findall(r"<polyline", svg)) == 1


def test_the_title_unit_and_legend_are_drawn_not_only_announced():
    svg = chart({"messages": [3, 4, 5, 6, 7], "other": [1, 1, 1, 1, 1]})

    texts = [html.unescape(text) for text in re.findall(r"<text[^>]*>([^<]+)</text>", svg)]
    assert texts[:2] == ["DMARC pass rate", "% of the day's messages"]
    assert {"messages", "other"} <= set(texts)
    assert len(re.findall(r'<rect [^>]*fill="#(4e79a7|000000)"', svg)) == 2


def test_a_chart_of_a_page_with_one_legend_draws_none_of_its_own():
    svg = str(line_chart(title="t", unit="messages a day", labels=LABELS, series={"sent": [1] * 5}, with_legend=False))
    assert "<rect" not in svg and ">sent<" not in svg

"""Server-rendered SVG charts for the console's dashboard: no JavaScript, no CDN, works offline."""

from collections.abc import Mapping, Sequence

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

# One colour per kind of count, the same in every chart and legend.
COLORS = {
    "sent": "#4e79a7",
    "delivered": "#59a14f",
    "bounced": "#e15759",
    "complained": "#b07aa1",
    "failed": "#f28e2b",
    "received": "#76b7b2",
}
# DMARC aggregate reports on a domain's page (not in the dashboard's legend).
REPORT_COLORS = {"messages": "#4e79a7", "dmarc pass": "#59a14f", "pass rate %": "#59a14f"}
_LEFT, _RIGHT, _BOTTOM = 36, 18, 22
_TITLE_ROW, _LEGEND_ROW = 18, 12  # above the plot: the title and unit, then the legend when drawn in the chart


def _segments(values: Sequence[int | None]) -> list[list[tuple[int, int]]]:
    """The runs of consecutive known values, as (index, value): a gap (None, a day without data) ends a run."""
    runs: list[list[tuple[int, int]]] = [[]]
    for n, value in enumerate(values):
        if value is None:
            runs.append([])
        else:
            runs[-1].append((n, value))
    return [run for run in runs if run]


def line_chart(
    *,
    title: str,
    unit: str,
    labels: list[str],
    series: Mapping[str, Sequence[int | None]],
    width: int = 470,
    height: int = 180,
    css: str = "ms-chart",
    colors: dict[str, str] = COLORS,
    with_legend: bool = True,
) -> SafeString:
    """One line per series over the labelled buckets, y (in `unit`) from 0 to the largest value, under its
    title and unit and (`with_legend`; the dashboard has one legend for all its charts) a legend. None is a
    gap, never a 0: a day no report covered is not a 0 % pass rate. Each point has a tooltip. `colors`: each
    series' colour by its name."""
    known = [value for values in series.values() for value in values if value is not None]
    peak = max(known, default=0) or 1
    top = _TITLE_ROW + (_LEGEND_ROW if with_legend else 0)
    plot_w, plot_h = width - _LEFT - _RIGHT, height - top - _BOTTOM
    step = plot_w / max(len(labels) - 1, 1)

    # format_html escapes its arguments into strings, so numbers are formatted before they go in.
    def x(n: int) -> str:
        return f"{_LEFT + n * step:.1f}"

    def y(value: int) -> str:
        return f"{top + plot_h - value / peak * plot_h:.1f}"

    lines = format_html_join(
        "",
        '<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"><title>{}</title></polyline>',
        (
            (colors[kind], " ".join(f"{x(n)},{y(v)}" for n, v in run), f"{kind}: {sum(known_values(values))}")
            for kind, values in series.items()
            for run in _segments(values)
        ),
    )
    points = format_html_join(
        "",
        '<circle cx="{}" cy="{}" r="2" fill="{}"><title>{} {}: {}</title></circle>',
        (
            (x(n), y(v), colors[kind], labels[n], kind, v)
            for kind, values in series.items()
            for n, v in enumerate(values)
            if v is not None and (v or len(values) == 1 or _isolated(values, n))
        ),
    )
    key = format_html_join(
        "",
        '<rect x="{}" y="{}" width="8" height="8" fill="{}"/><text x="{}" y="{}">{}</text>',
        (
            (_LEFT + 110 * i, _TITLE_ROW + 1, colors[kind], _LEFT + 110 * i + 11, _TITLE_ROW + 9, kind)
            for i, kind in enumerate(series if with_legend else [])
        ),
    )
    every = max(1, len(labels) // 6)
    ticks = format_html_join(
        "",
        '<text x="{}" y="{}" text-anchor="middle">{}</text>',
        ((x(n), height - 6, label) for n, label in enumerate(labels) if n % every == 0 or n == len(labels) - 1),
    )
    return format_html(
        '<svg class="{}" role="img" aria-label="{}" viewBox="0 0 {} {}" width="{}" height="{}" '
        'font-size="10" fill="currentColor">'
        "<title>{}</title>"
        '<text x="{}" y="12" font-size="12" font-weight="bold">{}</text>'
        '<text x="{}" y="12" text-anchor="end" fill-opacity=".7">{}</text>{}'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity=".3"/>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity=".15"/>'
        '<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{}" text-anchor="end">0</text>'
        "{}{}{}</svg>",
        css, title, width, height, width, height, title,
        4, title, width - 4, unit, key,
        _LEFT, top + plot_h, width - _RIGHT, top + plot_h,
        _LEFT, top, width - _RIGHT, top,
        _LEFT - 4, top + 4, peak, _LEFT - 4, top + plot_h,
        lines, points, ticks,
    )  # fmt: skip


def known_values(values: Sequence[int | None]) -> list[int]:
    return [value for value in values if value is not None]


def _isolated(values: Sequence[int | None], n: int) -> bool:
    """A known value with gaps on both sides: its run is one point, which no line shows, so a dot does."""
    before = n == 0 or values[n - 1] is None
    after = n == len(values) - 1 or values[n + 1] is None
    return before and after


def legend() -> SafeString:
    return format_html_join(
        "",
        '<span class="ms-legend"><span style="background:{}"></span>{}</span>',
        ((color, kind) for kind, color in COLORS.items()),
    )


def rate_bar(*, rate: float | None, limit: float, width: int = 120) -> SafeString:
    """A rate as a bar against its pause threshold (the marker); the scale ends at twice the threshold."""
    if rate is None:
        return mark_safe('<span class="ms-muted">no sends</span>')  # noqa: S308 - a constant
    scale = 2 * limit or 1
    filled = min(rate / scale, 1.0) * width
    color = "#e15759" if rate >= limit else "#f28e2b" if rate >= 0.8 * limit else "#59a14f"
    return format_html(
        '<svg class="ms-rate" role="img" aria-label="{} of {}" viewBox="0 0 {} 14" width="{}" height="14">'
        '<rect width="{}" height="14" fill="currentColor" fill-opacity=".08"/>'
        '<rect width="{}" height="14" fill="{}"/>'
        '<line x1="{}" x2="{}" y1="0" y2="14" stroke="currentColor" stroke-width="2"/></svg> {}',
        f"{rate:.2%}", f"{limit:.2%}", width, width, width,
        f"{filled:.1f}", color, width // 2, width // 2, f"{rate:.2%}",
    )  # fmt: skip

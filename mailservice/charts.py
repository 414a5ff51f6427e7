"""Server-rendered SVG charts for the console's dashboard: no JavaScript, no CDN, works offline."""

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
_LEFT, _RIGHT, _TOP, _BOTTOM = 36, 18, 10, 22


def line_chart(
    *,
    title: str,
    labels: list[str],
    series: dict[str, list[int]],
    width: int = 470,
    height: int = 170,
    css: str = "ms-chart",
    colors: dict[str, str] = COLORS,
) -> SafeString:
    """One line per series over the labelled buckets, y from 0 to the largest value; each point has a tooltip.
    `colors`: each series' colour by its name."""
    peak = max((max(values) for values in series.values() if values), default=0) or 1
    plot_w, plot_h = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
    step = plot_w / max(len(labels) - 1, 1)

    # format_html escapes its arguments into strings, so numbers are formatted before they go in.
    def x(n: int) -> str:
        return f"{_LEFT + n * step:.1f}"

    def y(value: int) -> str:
        return f"{_TOP + plot_h - value / peak * plot_h:.1f}"

    lines = format_html_join(
        "",
        '<polyline fill="none" stroke="{}" stroke-width="1.8" points="{}"><title>{}</title></polyline>',
        (
            (colors[kind], " ".join(f"{x(n)},{y(v)}" for n, v in enumerate(values)), f"{kind}: {sum(values)}")
            for kind, values in series.items()
        ),
    )
    points = format_html_join(
        "",
        '<circle cx="{}" cy="{}" r="2" fill="{}"><title>{} {}: {}</title></circle>',
        (
            (x(n), y(v), colors[kind], labels[n], kind, v)
            for kind, values in series.items()
            for n, v in enumerate(values)
            if v
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
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity=".3"/>'
        '<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="currentColor" stroke-opacity=".15"/>'
        '<text x="{}" y="{}" text-anchor="end">{}</text><text x="{}" y="{}" text-anchor="end">0</text>'
        "{}{}{}</svg>",
        css, title, width, height, width, height, title,
        _LEFT, _TOP + plot_h, width - _RIGHT, _TOP + plot_h,
        _LEFT, _TOP, width - _RIGHT, _TOP,
        _LEFT - 4, _TOP + 4, peak, _LEFT - 4, _TOP + plot_h,
        lines, points, ticks,
    )  # fmt: skip


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

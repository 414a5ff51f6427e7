"""The console's dashboard on the admin index: activity charts, the queue, rates against the pause thresholds."""

from typing import Any

from django import template
from django.conf import settings
from django.utils import timezone

from mailservice.charts import legend, line_chart, rate_bar
from messaging.aggregates import activity, status_counts_rollup
from messaging.selectors import queue_state

register = template.Library()

DOMAINS_SHOWN = 10  # the busiest; the rest are on the Domains page
_SPARK = {"width": 210, "height": 80, "css": "ms-chart ms-spark"}


@register.inclusion_tag("admin/messaging/dashboard.html")
def mailservice_dashboard() -> dict[str, Any]:
    now = timezone.now()
    if settings.CELERY_TASK_ALWAYS_EAGER:
        status_counts_rollup(now=now)  # no broker, so no beat: bring the counts up to date here
    data = activity(now=now)
    hour_labels = [f"{hour:%H}:00" for hour in data.hours]
    day_labels = [f"{day:%m-%d}" for day in data.days]
    domains = [
        {
            "name": domain.name,
            "paused": domain.sending_paused,
            "auto_paused": domain.auto_paused,
            "totals": {kind: domain.daily.total(kind) for kind in domain.daily.counts},
            "hourly": line_chart(
                title=f"{domain.name}, last 24 hours",
                unit="messages an hour",
                with_legend=False,
                labels=hour_labels,
                series=domain.hourly.counts,
                width=300,
                height=90,
            ),
            "daily": line_chart(
                title=f"{domain.name}, last 14 days",
                unit="messages a day",
                with_legend=False,
                labels=day_labels,
                series=domain.daily.counts,
                width=300,
                height=90,
            ),
            "bounce": rate_bar(rate=domain.rate("bounced"), limit=data.bounce_rate_limit),
            "complaint": rate_bar(rate=domain.rate("complained"), limit=data.complaint_rate_limit),
        }
        for domain in data.domains[:DOMAINS_SHOWN]
    ]
    return {
        "queue": queue_state(now=now),
        "legend": legend(),
        "overall_hourly": line_chart(
            title="All domains, last 24 hours",
            unit="messages an hour",
            with_legend=False,
            labels=hour_labels,
            series=data.overall_hourly.counts,
        ),
        "overall_daily": line_chart(
            title="All domains, last 14 days",
            unit="messages a day",
            with_legend=False,
            labels=day_labels,
            series=data.overall_daily.counts,
        ),
        "totals_24h": {kind: data.overall_hourly.total(kind) for kind in data.overall_hourly.counts},
        "domains": domains,
        "more_domains": max(0, len(data.domains) - DOMAINS_SHOWN),
        "bounce_rate_pct": f"{data.bounce_rate_limit * 100:g}",
        "complaint_rate_pct": f"{data.complaint_rate_limit * 100:g}",
        "now": now,
    }

"""What GET /metrics serves: the host's counters and histograms (mailservice/metrics.py), then gauges
read from the apps when Prometheus scrapes, so every web process reports the same values.

It lives in the API layer because it reads domains, messaging and webhooks, which the kernel may not.
"""

import os
from collections.abc import Iterator

from django.conf import settings
from django.utils import timezone
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from domains.models import Domain, SendingControl
from messaging.inbound.aggregate.selectors import report_gauges
from messaging.outbound.fleet_limits import relay_rate_status
from messaging.retention import held_partitions
from messaging.selectors import queue_state
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint


class ScrapeCollector(Collector):
    """The queue and the sending switches, read when /metrics is scraped.

    Two queries on the queue's partial index (`message_pending_idx`: accepted messages by
    next_attempt_at), one each on the domains and the global switch, two on the webhook tables
    (the pending count is served by the deliveries' partial index), two for the days of messages kept
    past retention (PostgreSQL: the partitions, the longest retention), two on DMARC and TLS reports of
    the last day, and the shared relay rate (Redis).
    """

    def collect(self) -> Iterator[Metric]:
        queue = queue_state(now=timezone.now())
        yield GaugeMetricFamily(
            "mailservice_queue_depth", "Accepted messages not yet delivered or given up", queue.depth
        )
        yield GaugeMetricFamily(
            "mailservice_queue_oldest_due_age_seconds",
            "How long the longest-waiting due message has been due (0 when none is due)",
            queue.oldest_due_seconds,
        )
        paused = GaugeMetricFamily(
            "mailservice_sending_paused",
            "1 while a domain's sending is paused (auto: by the safeguards)",
            labels=["domain", "auto"],
        )
        for name, is_paused, auto in Domain.objects.values_list("name", "sending_paused", "auto_paused"):
            paused.add_metric([name, "true" if auto else "false"], 1.0 if is_paused else 0.0)
        yield paused
        control = SendingControl.objects.filter(pk=1).values_list("paused", flat=True).first()
        yield GaugeMetricFamily(
            "mailservice_sending_paused_all", "1 while all sending is paused", 1.0 if control else 0.0
        )
        limits = GaugeMetricFamily(
            "mailservice_safeguard_rate_limit",
            "The bounce and complaint rates over which a domain is paused",
            labels=["kind"],
        )
        limits.add_metric(["bounce"], settings.MAILSERVICE_BOUNCE_RATE_LIMIT)
        limits.add_metric(["complaint"], settings.MAILSERVICE_COMPLAINT_RATE_LIMIT)
        yield limits
        yield GaugeMetricFamily(
            "mailservice_webhook_backlog",
            "Webhook deliveries waiting to be sent (new or to be retried)",
            WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING).count(),
        )
        yield GaugeMetricFamily(
            "mailservice_webhook_endpoints_disabled",
            "Webhook endpoints disabled after 5 days of failures",
            WebhookEndpoint.objects.filter(enabled=False).count(),
        )
        yield GaugeMetricFamily(
            "mailservice_retention_held_partitions",
            "Days of messages past retention kept because they hold messages still accepted (PostgreSQL)",
            len(held_partitions()),
        )
        yield from _report_gauges()
        effective = relay_rate_status()["effective"]
        yield GaugeMetricFamily(
            "mailservice_relay_rate",
            "The relay rate in force for the fleet, messages per second (+Inf: unlimited)",
            float("inf") if effective is None else float(effective),
        )


def _report_gauges() -> Iterator[Metric]:
    """DMARC and TLS reports whose period ended in the last day, per domain that has any."""
    figures = report_gauges()
    pass_rate = GaugeMetricFamily(
        "mailservice_dmarc_pass_rate",
        "Share of the messages DMARC aggregate reports of the last day counted that passed DMARC",
        labels=["domain"],
    )
    for name, rate in sorted(figures.dmarc_pass_rate.items()):
        pass_rate.add_metric([name], rate)
    yield pass_rate
    failures = GaugeMetricFamily(
        "mailservice_tls_report_failed_sessions",
        "Failed TLS sessions towards the domain that SMTP TLS reports of the last day stated",
        labels=["domain"],
    )
    for name, sessions in sorted(figures.tls_failed_sessions.items()):
        failures.add_metric([name], float(sessions))
    yield failures


def exposition() -> bytes:
    """The text /metrics serves: the host's counters and histograms, then the scrape-time gauges."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        events = CollectorRegistry()
        MultiProcessCollector(events)
    else:
        events = REGISTRY  # development and tests: this process's own metrics
    gauges = CollectorRegistry()
    gauges.register(ScrapeCollector())
    return generate_latest(events) + generate_latest(gauges)

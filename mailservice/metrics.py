"""Prometheus metrics: every metric the service exports is defined here, and only here.

Counters and histograms are written by whichever process sees the event (web, Celery worker,
inbound server). With PROMETHEUS_MULTIPROC_DIR set, prometheus-client keeps them in files in that
directory, which the web and worker processes of one host share, so the web's GET /metrics reports
the host's totals. Gauges of the queue and the pause switches are read from the database when
/metrics is scraped (`ScrapeCollector`), so every web process reports the same values.

Labels are bounded: a domain name (domains are created by operators), a status, a class or a type;
never a recipient, a message id or an error text.
"""

import os
from collections.abc import Iterator
from datetime import datetime

from django.conf import settings
from django.utils import timezone
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from domains.models import Domain, SendingControl
from messaging.relay_limits import relay_rate_status
from messaging.selectors import queue_state
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint

MESSAGES = Counter(
    "mailservice_messages",
    "Messages entering a status: accepted by the API, received, or an outcome (delivered, bounced, failed, complained)",
    ["status", "domain"],
)
RETRIES = Counter(
    "mailservice_retries", "Dispatch attempts deferred for a retry (a 4xx or a connection error)", ["domain"]
)
RELAY_REPLIES = Counter(
    "mailservice_relay_replies",
    "Final replies of the SMTP relay per message sent: 2xx, 4xx, 5xx, or connection_error (no reply)",
    ["reply_class"],
)
BOUNCES = Counter(
    "mailservice_bounces",
    "Bounces per recipient: smtp (the relay refused it with 5xx), report (a hard bounce report came back to the"
    " return path) or report_soft (a relay gave up on a temporary failure)",
    ["domain", "type"],
)
COMPLAINTS = Counter("mailservice_complaints", "Complaints (ARF feedback reports) about sent messages", ["domain"])
INBOUND = Counter(
    "mailservice_inbound_messages",
    "Inbound SMTP: transactions stored (mail or reports), refused or failed (451), and recipients refused at RCPT",
    ["outcome"],
)
WEBHOOK_DELIVERIES = Counter(
    "mailservice_webhook_deliveries",
    "Webhook requests: succeeded (2xx), retry (failed, tried again later) or failed (given up)",
    ["outcome"],
)
ACCEPT_SECONDS = Histogram(
    "mailservice_accept_seconds",
    "Time to answer an accepted POST /v1/send (validation, checks and the stored message)",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
)
DELIVERY_SECONDS = Histogram(
    "mailservice_delivery_seconds",
    "Time from acceptance to delivery at the relay, per delivered message",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600, 14400),
)


def reply_class(code: int) -> str:
    return f"{code // 100}xx" if 200 <= code < 600 else "connection_error"


def message_status(*, domain: str, status: str) -> None:
    MESSAGES.labels(status=status, domain=domain).inc()


def send_accepted(*, domain: str, seconds: float, is_test: bool) -> None:
    """An answered send: timed whatever the key; counted as a message only when live (the sandbox's is not mail)."""
    if not is_test:
        message_status(domain=domain, status="accepted")
    ACCEPT_SECONDS.observe(seconds)


def dispatch_recorded(*, domain: str, status: str, accepted_at: datetime) -> None:
    """One dispatch attempt's recorded outcome: a retry, or the message's final status."""
    if status == "accepted":
        RETRIES.labels(domain=domain).inc()
    elif status == "delivered":
        message_delivered(domain=domain, accepted_at=accepted_at)
    else:
        message_status(domain=domain, status=status)
        if status == "bounced":
            BOUNCES.labels(domain=domain, type="smtp").inc()


def report_recorded(*, domain: str, outcome: str) -> None:
    """One recipient's bounce or complaint from a report (messaging/inbound: bounce, soft_bounce, complaint)."""
    if outcome == "complaint":
        COMPLAINTS.labels(domain=domain).inc()
    elif outcome in ("bounce", "soft_bounce"):
        BOUNCES.labels(domain=domain, type="report" if outcome == "bounce" else "report_soft").inc()


def message_delivered(*, domain: str, accepted_at: datetime) -> None:
    message_status(domain=domain, status="delivered")
    DELIVERY_SECONDS.observe(max(0.0, (timezone.now() - accepted_at).total_seconds()))


class ScrapeCollector(Collector):
    """The queue and the sending switches, read when /metrics is scraped.

    Two queries on the queue's partial index (`message_pending_idx`: accepted messages by
    next_attempt_at), one each on the domains and the global switch, two on the webhook tables
    (the pending count is served by the deliveries' partial index), and the shared relay rate (Redis).
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
        effective = relay_rate_status()["effective"]
        yield GaugeMetricFamily(
            "mailservice_relay_rate",
            "The relay rate in force for the fleet, messages per second (+Inf: unlimited)",
            float("inf") if effective is None else float(effective),
        )


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

"""Prometheus metrics: every metric the service exports is defined here, and only here.

Counters and histograms are written by whichever process sees the event (web, Celery worker,
inbound server). With PROMETHEUS_MULTIPROC_DIR set, prometheus-client keeps them in files in that
directory, which the web and worker processes of one host share, so the web's GET /metrics reports
the host's totals. Gauges of the queue and the pause switches are read from the database when
/metrics is scraped (mailservice/api/scrape.py, above the apps it reads), so every web process
reports the same values.

Labels are bounded: a domain name (domains are created by operators), a status, a class or a type;
never a recipient, a message id or an error text.
"""

from datetime import datetime

from django.utils import timezone
from prometheus_client import Counter, Histogram

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
AGGREGATE_REPORTS = Counter(
    "mailservice_aggregate_reports",
    "DMARC and TLS reports received: stored, duplicate (sent again) or refused (kept as mail with the reason)",
    ["kind", "outcome"],
)
WEBHOOK_DELIVERIES = Counter(
    "mailservice_webhook_deliveries",
    "Webhook requests: succeeded (2xx), retry (failed, tried again later) or failed (given up)",
    ["outcome"],
)
TLS_REPORTS_SKIPPED = Counter(
    "mailservice_tls_reports_skipped",
    "TLS reports not sent because their rua mailbox or host had had MAILSERVICE_TLSRPT_MAX_PER_RUA that day",
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


def batch_accepted(*, domain: str, count: int, is_test: bool) -> None:
    """An answered batch of sends: its live messages counted (the accept histogram times single sends only)."""
    if not is_test:
        MESSAGES.labels(status="accepted", domain=domain).inc(count)


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


def aggregate_report(*, kind: str, outcome: str) -> None:
    AGGREGATE_REPORTS.labels(kind=kind, outcome=outcome).inc()


def tls_report_skipped() -> None:
    TLS_REPORTS_SKIPPED.inc()


def report_recorded(*, domain: str, outcome: str) -> None:
    """One recipient's bounce or complaint from a report (messaging/inbound: bounce, soft_bounce, complaint)."""
    if outcome == "complaint":
        COMPLAINTS.labels(domain=domain).inc()
    elif outcome in ("bounce", "soft_bounce"):
        BOUNCES.labels(domain=domain, type="report" if outcome == "bounce" else "report_soft").inc()


def message_delivered(*, domain: str, accepted_at: datetime) -> None:
    message_status(domain=domain, status="delivered")
    DELIVERY_SECONDS.observe(max(0.0, (timezone.now() - accepted_at).total_seconds()))

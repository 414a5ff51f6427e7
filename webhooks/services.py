"""Webhook endpoints, the fan-out of the event outbox into deliveries, and the deliveries themselves.

At least once, never lost: every MessageEvent is written with `published_at` NULL in the same
statement or transaction as the state change it records. `events_fan_out` turns such events into
one WebhookDelivery per interested endpoint and marks them published, in one transaction (a
message's delay events make deliveries at most once per MAILSERVICE_DELAYED_EVENT_INTERVAL: the
others are marked published with none, `quiet_delays`). A
delivery is claimed under a lease (a conditional UPDATE; the lease value is the fencing token of
every later write), sent with no transaction open, and its outcome recorded only by the lease
holder. A worker that dies mid-request leaves a lease that runs out; the delivery is then claimed
and sent again. At most MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY leases are live per endpoint,
and a request is over (its socket closed) within MAILSERVICE_WEBHOOK_TIMEOUT, before its lease
runs out: so a slow endpoint holds at most that many connections and threads of the webhooks
worker, each for at most the timeout, even against a receiver that trickles its answer.
"""

import functools
import logging
import random
import ssl
import time
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

import httpcore
import httpx
from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from domains.models import Domain
from mailservice import metrics
from mailservice.encryption import decrypt_secret, encrypt_secret
from mailservice.errors import ErrorCode, NotFound, ValidationFailed
from mailservice.http_deadline import REQUEST_ERRORS, post_status
from mailservice.ids import public_id
from mailservice.partitions import day_partition_name, day_partitions, partition_drop
from messaging.models import DmarcRecord, DmarcReport, Message, MessageEvent
from webhooks.models import DeliveryStatus, EventType, WebhookDelivery, WebhookEndpoint
from webhooks.payloads import PUBLIC_TYPE, dmarc_report_payload, event_payload, messages_data
from webhooks.secrets import secret_generate
from webhooks.signing import signature_headers
from webhooks.targets import TargetRefused, redacted_url, target_resolve, url_check

logger = logging.getLogger(__name__)

# Seconds to wait after failed attempt n (1-based), before jitter: about a day in all, 8 attempts.
RETRY_DELAYS = (5, 5 * 60, 30 * 60, 2 * 3600, 5 * 3600, 10 * 3600, 10 * 3600)
RETRY_JITTER = 0.2
# An endpoint that has not succeeded once for this long is disabled.
DISABLE_AFTER = timedelta(days=5)
# Secrets replaced by a rotation keep signing (a second signature) this long.
ROTATION_OVERLAP = timedelta(hours=24)
FAN_OUT_BATCH = 500


@dataclass(frozen=True)
class CreatedEndpoint:
    endpoint: WebhookEndpoint
    secret: str  # shown once


def event_types_checked(event_types: list[str]) -> list[str]:
    unknown = sorted(set(event_types) - set(EventType.values))
    if unknown:
        raise ValidationFailed(f"event: unknown type {unknown[0]} (one of {', '.join(EventType.values)})")
    return sorted(set(event_types))


def endpoint_create(*, domain: Domain, url: str, event_types: list[str]) -> CreatedEndpoint:
    """A new endpoint for `domain` receiving `event_types` (empty: all); its secret is returned once."""
    url_check(url)
    secret = secret_generate()
    endpoint = WebhookEndpoint.objects.create(
        domain=domain, url=url, event_types=event_types_checked(event_types), secret_sealed=encrypt_secret(secret)
    )
    return CreatedEndpoint(endpoint=endpoint, secret=secret)


def endpoint_get(*, public_id: str) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.select_related("domain").filter(public_id=public_id).first()
    if endpoint is None:
        raise NotFound(f"No webhook endpoint {public_id}", code=ErrorCode.NOT_FOUND)
    return endpoint


def endpoint_delete(*, endpoint: WebhookEndpoint) -> None:
    endpoint.delete()


def endpoint_rotate_secret(*, endpoint: WebhookEndpoint) -> str:
    """A new secret, returned once; the current one keeps signing too for ROTATION_OVERLAP."""
    secret = secret_generate()
    endpoint.previous_secret_sealed = endpoint.secret_sealed
    endpoint.previous_secret_expires_at = timezone.now() + ROTATION_OVERLAP
    endpoint.secret_sealed = encrypt_secret(secret)
    endpoint.save(update_fields=["secret_sealed", "previous_secret_sealed", "previous_secret_expires_at", "updated_at"])
    return secret


def endpoint_enable(*, endpoint: WebhookEndpoint) -> None:
    """Back on after being disabled: its failure streak starts over."""
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(
        enabled=True, disabled_reason="", failing_since=None, updated_at=timezone.now()
    )


def _signing_secrets(endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    secrets = [decrypt_secret(endpoint.secret_sealed)]
    if (
        endpoint.previous_secret_sealed
        and endpoint.previous_secret_expires_at
        and endpoint.previous_secret_expires_at > now
    ):
        secrets.append(decrypt_secret(endpoint.previous_secret_sealed))
    return secrets


def _interested_endpoints(events: list[MessageEvent], messages: dict[int, Message]) -> dict[int, list[WebhookEndpoint]]:
    """The enabled endpoints that want each event (by event id), in one query."""
    endpoints: dict[int, list[WebhookEndpoint]] = {}
    for endpoint in WebhookEndpoint.objects.filter(
        domain_id__in={message.domain_id for message in messages.values()}, enabled=True
    ):
        endpoints.setdefault(endpoint.domain_id, []).append(endpoint)
    return {
        event.pk: [
            endpoint
            for endpoint in endpoints.get(messages[event.message_id].domain_id, [])
            if event.type in PUBLIC_TYPE and endpoint.wants(PUBLIC_TYPE[event.type])
        ]
        for event in events
    }


# The recorded events published as `email.delayed`: a receiver's deferral (dispatch's), a DSN's delay.
_DELAY_TYPES = [recorded for recorded, public in PUBLIC_TYPE.items() if public == EventType.DELAYED]


def quiet_delays(events: list[MessageEvent]) -> set[int]:
    """The ids of the delay events among `events` that publish no webhook: a message publishes at most
    one `email.delayed` per MAILSERVICE_DELAYED_EVENT_INTERVAL. Decided from the message's history
    alone (its first delay publishes, then the first one an interval or more after the last that
    published), so whichever fan-out takes an event, and in whatever batch, decides the same."""
    delays = {event.pk for event in events if event.type in _DELAY_TYPES}
    if not delays:
        return set()
    interval = timedelta(seconds=settings.MAILSERVICE_DELAYED_EVENT_INTERVAL)
    history = (
        MessageEvent.objects.filter(
            message_id__in={event.message_id for event in events if event.pk in delays}, type__in=_DELAY_TYPES
        )
        .order_by("created_at", "id")
        .values_list("message_id", "id", "created_at")
    )
    last_published: dict[int, datetime] = {}
    quiet = set()
    for message_id, event_id, created_at in history:
        last = last_published.get(message_id)
        if last is not None and created_at - last < interval:
            quiet.add(event_id)
        else:
            last_published[message_id] = created_at
    return quiet & delays


def events_fan_out(*, limit: int = FAN_OUT_BATCH) -> int:
    """Turn up to `limit` unpublished message events, and up to `limit` unpublished DMARC reports,
    into deliveries and mark them published; returns how many it published."""
    return _message_events_fan_out(limit=limit) + _dmarc_reports_fan_out(limit=limit)


def _dmarc_reports_fan_out(*, limit: int) -> int:
    """`domain.dmarc_report` for each new DMARC report (dmarc_report_unpublished_idx), atomically;
    concurrent callers take disjoint reports."""
    now = timezone.now()
    with transaction.atomic():
        reports = list(
            DmarcReport.objects.filter(published_at__isnull=True)
            .select_related("domain")
            .order_by("id")
            .select_for_update(skip_locked=True, of=("self",))[:limit]
        )
        if not reports:
            return 0
        endpoints: dict[int, list[WebhookEndpoint]] = {}
        for endpoint in WebhookEndpoint.objects.filter(domain_id__in={r.domain_id for r in reports}, enabled=True):
            if endpoint.wants(EventType.DMARC_REPORT):
                endpoints.setdefault(endpoint.domain_id, []).append(endpoint)
        records: dict[int, list[DmarcRecord]] = {}
        wanted = [report.pk for report in reports if report.domain_id in endpoints]
        for record in DmarcRecord.objects.filter(report_id__in=wanted).order_by("id"):
            records.setdefault(record.report_id, []).append(record)
        deliveries = []
        for report in reports:
            if report.domain_id not in endpoints:
                continue
            event_id = public_id("evt")
            payload = dmarc_report_payload(report=report, records=records.get(report.pk, []), event_id=event_id)
            deliveries += [
                WebhookDelivery(
                    endpoint=endpoint,
                    dmarc_report=report,
                    subject_created_at=report.created_at,
                    event_id=event_id,
                    event_type=EventType.DMARC_REPORT,
                    payload=payload,
                    next_attempt_at=now,
                )
                for endpoint in endpoints[report.domain_id]
            ]
        WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
        DmarcReport.objects.filter(pk__in=[report.pk for report in reports]).update(published_at=now)
    return len(reports)


def _message_events_fan_out(*, limit: int) -> int:
    """Turn up to `limit` unpublished events into deliveries and mark them published, atomically;
    returns how many events it published. Concurrent callers take disjoint events."""
    now = timezone.now()
    with transaction.atomic():
        events = list(
            MessageEvent.objects.filter(published_at__isnull=True)
            .order_by("id")
            .select_for_update(skip_locked=True)[:limit]
        )
        if not events:
            return 0
        # Bodies and raw source are read only for the few messages whose payload needs them.
        messages = (
            Message.objects.select_related("domain")
            .defer("text", "html", "raw")
            .in_bulk({event.message_id for event in events})
        )
        wanted_by = _interested_endpoints(events, messages)
        for quiet in quiet_delays([event for event in events if wanted_by[event.pk]]):
            wanted_by[quiet] = []
        data = messages_data([messages[pk] for pk in {event.message_id for event in events if wanted_by[event.pk]}])
        deliveries = []
        for event in events:
            wanted = wanted_by[event.pk]
            if not wanted:
                continue
            message, event_id = messages[event.message_id], event.public_id
            payload = event_payload(event=event, message=message, message_data=data[message.pk])
            deliveries += [
                WebhookDelivery(
                    endpoint=endpoint,
                    message_event=event,
                    subject_created_at=event.created_at,
                    event_id=event_id,
                    event_type=PUBLIC_TYPE[event.type],
                    payload=payload,
                    next_attempt_at=now,
                )
                for endpoint in wanted
            ]
        WebhookDelivery.objects.bulk_create(deliveries, ignore_conflicts=True)
        MessageEvent.objects.filter(pk__in=[event.pk for event in events]).update(published_at=now)
    return len(events)


def _due(now: datetime) -> Q:
    return Q(status=DeliveryStatus.PENDING, next_attempt_at__lte=now) & (
        Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    )


def endpoints_due() -> list[int]:
    """The enabled endpoints that have a delivery due."""
    due = WebhookDelivery.objects.filter(_due(timezone.now()), endpoint__enabled=True)
    # order_by(): the model's ordering would make DISTINCT return one row per delivery.
    return list(due.order_by().values_list("endpoint_id", flat=True).distinct())


def deliveries_claim(*, endpoint_id: int, limit: int) -> list[WebhookDelivery]:
    """Lease up to `limit` due deliveries of the endpoint, within its concurrency cap, oldest first."""
    now = timezone.now()
    lease = now + timedelta(seconds=settings.MAILSERVICE_WEBHOOK_LEASE_SECONDS)
    with transaction.atomic():
        # The endpoint row's lock serialises the claimers of one endpoint, so the cap holds.
        if not WebhookEndpoint.objects.select_for_update().filter(pk=endpoint_id, enabled=True).exists():
            return []
        mine = WebhookDelivery.objects.filter(endpoint_id=endpoint_id)
        in_flight = mine.filter(status=DeliveryStatus.PENDING, lease_expires_at__gte=now).count()
        free = min(limit, settings.MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY - in_flight)
        if free <= 0:
            return []
        ids = list(mine.filter(_due(now)).order_by("next_attempt_at", "id").values_list("pk", flat=True)[:free])
        mine.filter(_due(now), pk__in=ids).update(lease_expires_at=lease, attempts=F("attempts") + 1)
    return list(WebhookDelivery.objects.select_related("endpoint").filter(pk__in=ids, lease_expires_at=lease))


@dataclass(frozen=True)
class AttemptResult:
    status_code: int | None
    latency_ms: int | None
    error: str

    @property
    def succeeded(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context per process: building one loads the CA bundle, which was three
    quarters of a delivery's CPU (bench/results/bench-denominators.md). Connections are still not
    pooled: each delivery pins its own resolved address and SNI, and a pooled connection to a shared
    address would carry another host name's certificate check."""
    return httpx.create_ssl_context()


def _post(delivery: WebhookDelivery) -> AttemptResult:
    """One request, no transaction open, over by MAILSERVICE_WEBHOOK_TIMEOUT whatever the receiver does."""
    endpoint = delivery.endpoint
    timeout = settings.MAILSERVICE_WEBHOOK_TIMEOUT
    # The name's lookup counts too: no socket is opened after the deadline, whatever the resolver took.
    deadline = time.monotonic() + timeout
    try:
        target = target_resolve(endpoint.url)
    except TargetRefused as exc:
        return AttemptResult(None, None, f"refused: {exc}")
    now = timezone.now()
    headers = {
        "Host": target.host,
        "Content-Type": "application/json",
        "User-Agent": "mailservice-webhooks/1",
        **signature_headers(
            event_id=delivery.event_id, timestamp=now, body=delivery.payload, secrets=_signing_secrets(endpoint, now)
        ),
    }
    started = time.monotonic()
    try:
        if started >= deadline:
            raise httpcore.ConnectTimeout("deadline passed resolving the name")
        status_code = post_status(
            url=target.url,
            headers=headers,
            body=delivery.payload.encode(),
            sni_hostname=target.sni_hostname,
            ssl_context=_tls_context(),
            timeout=deadline - started,
        )
    except httpcore.TimeoutException as exc:
        return AttemptResult(None, None, f"no answer within {timeout:g}s ({type(exc).__name__})")
    except REQUEST_ERRORS as exc:
        return AttemptResult(None, None, f"{type(exc).__name__}: {exc}".rstrip(": "))
    latency_ms = int((time.monotonic() - started) * 1000)
    return AttemptResult(status_code, latency_ms, "" if 200 <= status_code < 300 else f"HTTP {status_code}")


def retry_delay(*, attempt: int) -> timedelta | None:
    """The wait after failed attempt `attempt` (1-based), with jitter; None once the schedule is used up."""
    if attempt > len(RETRY_DELAYS):
        return None
    return timedelta(seconds=RETRY_DELAYS[attempt - 1] * (1 + random.uniform(-RETRY_JITTER, RETRY_JITTER)))


def _record(delivery: WebhookDelivery, result: AttemptResult) -> bool:
    """Write the attempt's outcome if this worker still holds the lease; False if it lost it."""
    now = timezone.now()
    fields: dict = {
        "lease_expires_at": None,
        "last_status_code": result.status_code,
        "last_latency_ms": result.latency_ms,
        "last_error": result.error[:1000],
        "updated_at": now,
    }
    if result.succeeded:
        fields |= {"status": DeliveryStatus.SUCCEEDED, "delivered_at": now}
    else:
        delay = retry_delay(attempt=delivery.attempts)
        fields |= {"status": DeliveryStatus.FAILED} if delay is None else {"next_attempt_at": now + delay}
    endpoint = WebhookEndpoint.objects.filter(pk=delivery.endpoint_id)
    with transaction.atomic():
        mine = WebhookDelivery.objects.filter(
            # subject_created_at: the UPDATE reads the one day partition the delivery is in.
            pk=delivery.pk,
            subject_created_at=delivery.subject_created_at,
            lease_expires_at=delivery.lease_expires_at,
        )
        if mine.update(**fields) != 1:
            return False
        outcome = "succeeded" if result.succeeded else fields.get("status", "retry")
        metrics.WEBHOOK_DELIVERIES.labels(outcome=str(outcome)).inc()
        if result.succeeded:
            endpoint.filter(failing_since__isnull=False).update(failing_since=None, updated_at=now)
        else:
            endpoint.filter(failing_since__isnull=True).update(failing_since=now, updated_at=now)
            endpoint.filter(enabled=True, failing_since__lt=now - DISABLE_AFTER).update(
                enabled=False,
                disabled_reason=f"disabled {now:%Y-%m-%d %H:%M} UTC: every delivery failed for 5 days ({result.error})",
                updated_at=now,
            )
    return True


def _lease_renew(delivery: WebhookDelivery) -> bool:
    """Extend a lease still held to a full MAILSERVICE_WEBHOOK_LEASE_SECONDS from now; False if lost.

    The request that follows is over within MAILSERVICE_WEBHOOK_TIMEOUT, shorter than the lease
    (config/settings.py refuses otherwise), so its socket is closed before anyone can claim the
    delivery again, however long the task waited in the queue: the cap counts every open request."""
    now = timezone.now()
    lease = now + timedelta(seconds=settings.MAILSERVICE_WEBHOOK_LEASE_SECONDS)
    renewed = WebhookDelivery.objects.filter(
        pk=delivery.pk,
        subject_created_at=delivery.subject_created_at,
        status=DeliveryStatus.PENDING,
        lease_expires_at=delivery.lease_expires_at,
        lease_expires_at__gt=now,
    ).update(lease_expires_at=lease)
    if renewed != 1:
        return False
    delivery.lease_expires_at = lease
    return True


def delivery_attempt(*, delivery: WebhookDelivery) -> bool:
    """Send one claimed delivery and record the outcome; False if the lease was lost meanwhile."""
    if delivery.lease_expires_at is None or not _lease_renew(delivery):
        return False
    result = _post(delivery)
    if not result.succeeded:
        logger.info("webhook %s to %s: %s", delivery.event_id, redacted_url(delivery.endpoint.url), result.error)
    return _record(delivery, result)


def deliveries_of_dropped_events_drop(*, partition: str, day: date, **kwargs: object) -> None:
    """Retention is dropping a day partition of events (messaging.partitioning.history_partition_dropping):
    their deliveries go with them, as the ORM's cascade would have taken them with each event.

    Deliveries are partitioned by their event's day (subject_created_at): that day's partition of
    deliveries is dropped whole, in the transaction of the events' drop, with the DMARC reports'
    deliveries of the same day (a report outlives its deliveries). What is left is a DELETE that
    pruning confines to the DEFAULT partition (deliveries of a day with no partition of its own),
    or, while the table is still plain (before partition_history), the rows of those events."""
    table = WebhookDelivery._meta.db_table
    if day_partition_name(table, day) in {p.name for p in day_partitions(table)}:
        partition_drop(day_partition_name(table, day))
    start = datetime(day.year, day.month, day.day, tzinfo=UTC)
    with connection.cursor() as cursor:
        cursor.execute(
            f"DELETE FROM {connection.ops.quote_name(table)} "  # noqa: S608
            "WHERE subject_created_at >= %s AND subject_created_at < %s "
            f"AND message_event_id IN (SELECT id FROM {connection.ops.quote_name(partition)})",
            [start, start + timedelta(days=1)],
        )

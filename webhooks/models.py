from django.db import models

from domains.models import Domain
from mailservice.encryption import EncryptedSecretField
from mailservice.ids import public_id
from messaging.models import DmarcReport, MessageEvent
from webhooks.targets import redacted_url


def _endpoint_public_id() -> str:
    return public_id("whk")


class EventType(models.TextChoices):
    """The event types an application can subscribe to (docs/webhooks.md)."""

    ACCEPTED = "email.accepted"
    DELIVERED = "email.delivered"
    DELAYED = "email.delayed"
    BOUNCED = "email.bounced"
    COMPLAINED = "email.complained"
    FAILED = "email.failed"
    SUPPRESSED = "email.suppressed"
    RECEIVED = "email.received"
    DMARC_REPORT = "domain.dmarc_report"


class WebhookEndpoint(models.Model):
    """An application URL that receives one domain's events, signed per Standard Webhooks."""

    public_id = models.CharField(max_length=40, unique=True, default=_endpoint_public_id, editable=False)
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.URLField(max_length=2000, help_text="http(s) only; private and loopback targets are refused")
    event_types = models.JSONField(default=list, blank=True, help_text="Event types to send; empty means all")
    secret_sealed = EncryptedSecretField(editable=False, help_text="The signing secret, encrypted")
    previous_secret_sealed = EncryptedSecretField(blank=True, editable=False)
    previous_secret_expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Until then the secret before the last rotation also signs"
    )
    enabled = models.BooleanField(default=True)
    disabled_reason = models.TextField(blank=True)
    failing_since = models.DateTimeField(
        null=True, blank=True, help_text="First failure since the last success; 5 days of it disables the endpoint"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        # Without userinfo and query: this label reaches the admin's change log.
        return f"{redacted_url(self.url)} ({self.domain})"

    def wants(self, event_type: str) -> bool:
        return not self.event_types or event_type in self.event_types


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    FAILED = "failed", "failed (gave up)"


class WebhookDelivery(models.Model):
    """One event for one endpoint: its payload, frozen when the event was fanned out, and how sending it went."""

    endpoint = models.ForeignKey(WebhookEndpoint, on_delete=models.CASCADE, related_name="deliveries")
    # What the event is about: a message's event, or (domain.dmarc_report) a DMARC report.
    # No foreign key in the database: events are partitioned by day on PostgreSQL, and retention drops
    # whole partitions (messaging.retention). Deleting an event through the ORM still deletes these.
    message_event = models.ForeignKey(
        MessageEvent, null=True, on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    dmarc_report = models.ForeignKey(DmarcReport, null=True, on_delete=models.CASCADE, related_name="+")
    # The partition key on PostgreSQL (mailservice/partitions.py): the day of what the delivery is about,
    # not of the delivery, so that the exactly-once constraints below, which must hold it, stay exact
    # (a thing has one created_at), and an events day is dropped with its deliveries day.
    subject_created_at = models.DateTimeField(
        help_text="When the event (or the DMARC report) this delivery is about was created"
    )
    event_id = models.CharField(max_length=40, help_text="The event's public id: webhook-id, the same on every retry")
    event_type = models.CharField(max_length=20, choices=EventType.choices)
    payload = models.TextField(help_text="The exact JSON body that is signed and sent")
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True, help_text="A worker is sending it until then")
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_latency_ms = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "webhook deliveries"
        ordering = ["-created_at", "-id"]
        constraints = [
            # Fan-out's INSERT ... ON CONFLICT DO NOTHING: one delivery of a thing per endpoint.
            models.UniqueConstraint(
                fields=["endpoint", "message_event", "subject_created_at"], name="webhook_delivery_once_per_endpoint"
            ),
            models.UniqueConstraint(
                fields=["endpoint", "dmarc_report", "subject_created_at"], name="webhook_delivery_report_once"
            ),
            models.CheckConstraint(
                condition=models.Q(message_event__isnull=False, dmarc_report__isnull=True)
                | models.Q(message_event__isnull=True, dmarc_report__isnull=False),
                name="webhook_delivery_about_one_thing",
            ),
        ]
        indexes = [
            # delivery_claim: an endpoint's pending deliveries that are due, oldest first
            models.Index(
                fields=["endpoint", "next_attempt_at"],
                condition=models.Q(status="pending"),
                name="webhook_delivery_due_idx",
            ),
            # the console: an endpoint's recent deliveries (on PostgreSQL, merged from each day partition's)
            models.Index(fields=["endpoint", "-created_at"], name="webhook_delivery_recent_idx"),
            # the console: an endpoint's deliveries that gave up, newest first (few among many)
            models.Index(
                fields=["endpoint", "-created_at"],
                condition=models.Q(status="failed"),
                name="webhook_delivery_failed_idx",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.event_type} {self.event_id} -> {self.endpoint_id}"

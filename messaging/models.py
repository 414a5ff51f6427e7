from django.db import models

from domains.models import Domain
from mailservice.ids import public_id
from templates_app.models import Template


def _message_public_id() -> str:
    return public_id("msg")


class Direction(models.TextChoices):
    SENT = "sent"
    RECEIVED = "received"


class Status(models.TextChoices):
    ACCEPTED = "accepted"
    DELIVERED = "delivered"
    RECEIVED = "received"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"


class Message(models.Model):
    public_id = models.CharField(max_length=40, unique=True, default=_message_public_id, editable=False)
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="messages")
    direction = models.CharField(max_length=8, choices=Direction.choices)
    status = models.CharField(max_length=10, choices=Status.choices)

    from_address = models.TextField()
    to = models.JSONField(default=list, help_text="Mailboxes as given in the send, or the inbound recipients")
    cc = models.JSONField(default=list, blank=True)
    bcc = models.JSONField(default=list, blank=True, help_text="Envelope only: never written into the headers")
    reply_to = models.JSONField(default=list, blank=True)
    subject = models.TextField(blank=True)
    text = models.TextField(null=True, blank=True)
    html = models.TextField(null=True, blank=True)
    template = models.ForeignKey(Template, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    template_version = models.PositiveIntegerField(null=True, blank=True)

    # Dispatch bookkeeping (sent messages).
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="When dispatch may next try")
    lease_expires_at = models.DateTimeField(null=True, blank=True, help_text="A worker holds the message until then")
    last_error = models.TextField(blank=True)
    message_id_header = models.CharField(max_length=255, blank=True, help_text="The RFC 5322 Message-ID")

    # Inbound messages keep what arrived on the wire.
    envelope_from = models.TextField(blank=True)
    raw = models.BinaryField(null=True, blank=True, editable=False)

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(direction="received", status__in=["received"])
                | models.Q(direction="sent", status__in=["accepted", "delivered", "bounced", "complained", "failed"]),
                name="message_status_matches_direction",
            ),
        ]
        indexes = [
            # GET /v1/messages: newest first within a domain (keyset on created_at, public_id)
            models.Index(fields=["domain", "-created_at", "-public_id"], name="message_list_idx"),
            # GET /v1/messages?direction=…
            models.Index(fields=["domain", "direction", "-created_at", "-public_id"], name="message_list_dir_idx"),
            # the dispatch sweeper: accepted messages due for an attempt
            models.Index(fields=["next_attempt_at"], condition=models.Q(status="accepted"), name="message_pending_idx"),
            # fair dispatch (messaging/fairness.py): the domains with accepted messages (a skip scan, one
            # descent per domain), then one domain's due messages oldest first
            models.Index(
                fields=["domain", "next_attempt_at"],
                condition=models.Q(status="accepted"),
                name="message_pending_domain_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id


class EventType(models.TextChoices):
    ACCEPTED = "accepted"
    DEFERRED = "deferred", "deferred (temporary failure, will retry)"
    DELIVERED = "delivered"
    RECIPIENT_REJECTED = "recipient_rejected"
    BOUNCED = "bounced"
    DELAYED = "delayed", "delayed (DSN reported a delay)"
    FAILED = "failed"
    SUPPRESSED = "suppressed"
    COMPLAINED = "complained"
    RECEIVED = "received"


class MessageEvent(models.Model):
    """One step in a message's history: shown to operators, never through the API."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="events")
    type = models.CharField(max_length=20, choices=EventType.choices)
    recipient = models.CharField(max_length=320, blank=True)
    detail = models.TextField(blank=True, help_text="e.g. the SMTP reply")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.message_id} {self.type}"


class SuppressionReason(models.TextChoices):
    BOUNCE = "bounce"
    COMPLAINT = "complaint"
    MANUAL = "manual"


class Suppression(models.Model):
    """A recipient address a domain must no longer contact."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="suppressions")
    address = models.CharField(max_length=320, help_text="Lower-case bare address")
    reason = models.CharField(max_length=10, choices=SuppressionReason.choices)
    source_message = models.ForeignKey(Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="+")
    detail = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["domain", "address"], name="suppression_unique_per_domain")]

    def __str__(self) -> str:
        return f"{self.address} ({self.domain}, {self.reason})"

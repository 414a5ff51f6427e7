"""Messages, sent and received, and their events: the record every channel writes and the API, the
console and webhooks read."""

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import models
from django.db.models.functions import Upper
from django.utils.crypto import salted_hmac

from domains.models import Domain
from mailservice.ids import derived_timed_public_id, public_id_time, timed_public_id
from templates_app.models import Template


def _message_public_id() -> str:
    return timed_public_id("msg")


# A message's created_at is set when it is saved, a moment after its public id was made; a lookup by a
# timed public id looks this far either side of the id's time (public_id_condition).
_PUBLIC_ID_BEFORE = timedelta(minutes=1)
_PUBLIC_ID_AFTER = timedelta(hours=1)


def public_id_condition(public_id: str) -> models.Q:
    """The message with this public id, as a condition that also bounds created_at when the id carries its
    creation time (new ids do, mailservice.ids.timed_public_id): on PostgreSQL the lookup then reads one
    or two daily partitions instead of every one (mailservice/partitions.py). Older ids name no time."""
    made = public_id_time(public_id)
    if made is None:
        return models.Q(public_id=public_id)
    return models.Q(
        public_id=public_id, created_at__gte=made - _PUBLIC_ID_BEFORE, created_at__lt=made + _PUBLIC_ID_AFTER
    )


def message_by_public_id(messages: "models.QuerySet[Message]", public_id: str) -> "Message | None":
    """The first of `messages` with this public id: looked for near the id's time first, then (a row whose
    created_at was moved, e.g. an import) everywhere, which on PostgreSQL probes each partition's index."""
    # No ORDER BY (first() would sort by id, which on partitions reads each one's primary key in order).
    found = next(iter(messages.filter(public_id_condition(public_id)).order_by()[:1]), None)
    if found is None and public_id_time(public_id) is not None:
        found = next(iter(messages.filter(public_id=public_id).order_by()[:1]), None)
    return found


# Sent mail that was submitted over SMTP (Message.submitted), as a query condition: the Message-ID
# index's and the lookup's that must match it for the planner to use the index.
SUBMITTED = models.Q(envelope_recipients__isnull=False)


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
    public_id = models.CharField(max_length=40, default=_message_public_id, editable=False)
    # No index of its own: message_list_idx starts with the domain.
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="messages", db_index=False)
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
    # Indexed only where set (message_template_idx), for a template's deletion.
    template = models.ForeignKey(
        Template, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_index=False
    )
    template_version = models.PositiveIntegerField(null=True, blank=True)
    is_test = models.BooleanField(
        default=False, help_text="Sent with a test key: never handed to SMTP, its outcome simulated"
    )

    # Dispatch bookkeeping (sent messages).
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True, help_text="When dispatch may next try")
    lease_expires_at = models.DateTimeField(null=True, blank=True, help_text="A worker holds the message until then")
    last_error = models.TextField(blank=True)
    message_id_header = models.CharField(max_length=255, blank=True, help_text="The RFC 5322 Message-ID")
    feedback_id = models.CharField(
        max_length=255,
        blank=True,
        default="",
        db_default="",
        help_text="The Feedback-ID header it goes out with: template or inline, API key, domain, sender id",
    )

    # Received mail, and mail submitted over SMTP (messaging.submission), keep what arrived on the wire.
    envelope_from = models.TextField(blank=True)
    raw = models.BinaryField(null=True, blank=True, editable=False)
    envelope_recipients = models.JSONField(
        null=True,
        blank=True,
        editable=False,
        help_text="Submitted over SMTP: the envelope recipients, who alone receive the message as submitted",
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # GET /v1/messages/{id} and every lookup by public id (public_id_condition). A constraint rather
            # than unique=True, which on PostgreSQL adds a second index for LIKE that no query uses. It holds
            # created_at because a partitioned table's unique constraints must hold the partition key
            # (mailservice/partitions.py); ids stay unique by their ~103 random bits.
            models.UniqueConstraint(fields=["public_id", "created_at"], name="message_public_id_unique"),
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
            # fair dispatch (messaging/outbound/fairness.py): the domains with accepted messages (a skip scan, one
            # descent per domain), then one domain's due messages oldest first
            models.Index(
                fields=["domain", "next_attempt_at"],
                condition=models.Q(status="accepted"),
                name="message_pending_domain_idx",
            ),
            # deleting a template sets its messages' template to NULL; most messages have none
            models.Index(fields=["template"], condition=models.Q(template__isnull=False), name="message_template_idx"),
            # a report that names no VERP id: a submitted message by its own Message-ID in any case
            # (inbound/services.py: _reported_message); API mail's is derived from its public id
            models.Index(
                Upper("message_id_header"),
                condition=models.Q(direction="sent") & SUBMITTED,
                name="message_id_header_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.public_id

    @property
    def submitted(self) -> bool:
        """Submitted over SMTP: dispatched as its stored MIME rather than rendered from the fields."""
        return self.envelope_recipients is not None

    @property
    def envelope_mailboxes(self) -> list[str]:
        """Who the message goes to: a submission's own envelope, else To, Cc and Bcc."""
        if self.envelope_recipients is not None:
            return list(self.envelope_recipients)
        return [*self.to, *self.cc, *self.bcc]


class EventType(models.TextChoices):
    ACCEPTED = "accepted"
    DEFERRED = "deferred", "deferred (temporary failure, will retry)"
    # The service's own put-back (a hold, a slot, a rate, warm-up, a slow destination): history only, no webhook.
    HELD = "held", "held back (not sent, no attempt used)"
    DELIVERED = "delivered"
    RECIPIENT_REJECTED = "recipient_rejected"
    BOUNCED = "bounced", "bounced (permanent failure)"
    SOFT_BOUNCED = "soft_bounced", "soft bounced (a receiver gave up, or refused with a 4.x.x status)"
    DELAYED = "delayed", "delayed (DSN reported a delay)"
    FAILED = "failed"
    SUPPRESSED = "suppressed"
    COMPLAINED = "complained"
    RECEIVED = "received"


class BounceType(models.TextChoices):
    HARD = "hard"  # permanent: the address does not take mail
    SOFT = "soft"  # temporary: the relay gave up on it, or refused it with a 4xx


class ReplyCause(models.TextChoices):
    """Why a receiver refused or deferred mail: kept for compatibility, derived from its RefusalReason
    (messaging/refusals.py CAUSE_OF)."""

    AUTHENTICATION = "authentication"  # SPF, DKIM, DMARC, alignment or PTR failed: `fix_check` names the check
    REPUTATION = "reputation"  # the sending address or domain is blocklisted or has a poor reputation
    RATE_LIMITED = "rate_limited"  # too much mail, too fast: the receiver throttles
    POLICY = "policy"  # another of the receiver's rules (RFC 3463 X.7.x) refused it
    MAILBOX = "mailbox"  # the recipient's address or mailbox (RFC 3463 X.1.x, X.2.x)
    OTHER = "other"  # a failure no known code explains


class RefusalReason(models.TextChoices):
    """Why a receiver refused or deferred mail, as an application acts on it (messaging/refusals.py).
    Only user_unknown, mailbox_disabled and domain_not_found suppress the recipient; blocked,
    spam_detected, authentication and policy are the sender's to fix."""

    USER_UNKNOWN = "user_unknown"  # no such mailbox: remove the address
    MAILBOX_FULL = "mailbox_full"  # try later
    MAILBOX_DISABLED = "mailbox_disabled"  # the account is disabled or closed: remove the address
    DOMAIN_NOT_FOUND = "domain_not_found"  # the domain does not exist or accepts no mail (null MX)
    HOST_UNREACHABLE = "host_unreachable"  # no connection to the receiver
    BLOCKED = "blocked"  # the sending address, domain or IP is blocked, or must confirm or be whitelisted
    SPAM_DETECTED = "spam_detected"  # the message was taken for spam
    CONTENT_REJECTED = "content_rejected"  # size, virus, attachment
    AUTHENTICATION = "authentication"  # SPF, DKIM, DMARC, PTR: `fix_check` names the check
    POLICY = "policy"  # another of the receiver's rules (relaying, TLS, the envelope sender)
    RATE_LIMITED = "rate_limited"  # too much mail, too fast
    GREYLISTED = "greylisted"  # deferred once on purpose (RFC 6647)
    EXPIRED = "expired"  # a relay gave up after retrying
    OTHER = "other"  # a failure no rule explains


@dataclass(frozen=True)
class EventRecord:
    """An event to record, built by the code that knows what happened (dispatch, the sandbox, inbound)."""

    type: str
    recipient: str
    detail: str
    smtp_code: int | None = None
    enhanced_status: str = ""
    diagnostic: str = ""
    bounce_type: str = ""
    remote_host: str = ""
    feedback_type: str = ""
    cause: str = ""
    fix_check: str = ""
    reason: str = ""

    def row(self, message: "Message") -> "MessageEvent":
        return MessageEvent(message=message, domain_id=message.domain_id, is_test=message.is_test, **asdict(self))


class MessageEvent(models.Model):
    """One step in a message's history: shown to operators, and (the published types) to the domain's
    applications through webhooks and GET /v1/events."""

    # No foreign key in the database: on PostgreSQL messages are partitioned by day and retention drops
    # whole partitions (messaging.retention), which a key into them would forbid. Deleting a message
    # through the ORM still deletes its events; the row purge deletes them itself.
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="events", db_constraint=False)
    # The message's domain and side, copied onto the event when it is written, so that a domain's event stream
    # (GET /v1/events) is one range of event_stream_idx rather than a join through every message. Rows written
    # before they existed were filled by migration 0023; save() fills them from the message when not given.
    # DO_NOTHING: a domain's events go with its messages.
    domain = models.ForeignKey(
        Domain, on_delete=models.DO_NOTHING, null=True, related_name="+", db_constraint=False, db_index=False
    )
    is_test = models.BooleanField(default=False, db_default=False)
    type = models.CharField(max_length=20, choices=EventType.choices)
    recipient = models.CharField(max_length=320, blank=True)
    detail = models.TextField(blank=True, help_text="e.g. the SMTP reply, or a report's diagnostic")
    # What the event is about, as data, written with it (webhooks/payloads.py copies these, never parses
    # `detail`). db_default: the one-statement INSERTs of dispatch and inbound name only the columns they set.
    smtp_code = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="The SMTP reply code the relay (or the sandbox) answered, e.g. 550"
    )
    enhanced_status = models.CharField(
        max_length=16, blank=True, default="", db_default="", help_text="The enhanced status code, e.g. 5.1.1"
    )
    diagnostic = models.TextField(
        blank=True, default="", db_default="", help_text="The reply's text, or the report's Diagnostic-Code"
    )
    bounce_type = models.CharField(
        max_length=4, choices=BounceType.choices, blank=True, default="", db_default="", help_text="Bounces only"
    )
    remote_host = models.CharField(
        max_length=255, blank=True, default="", db_default="", help_text="The relay that answered, when known"
    )
    feedback_type = models.CharField(
        max_length=32, blank=True, default="", db_default="", help_text="A complaint's ARF Feedback-Type"
    )
    cause = models.CharField(
        max_length=16,
        choices=ReplyCause.choices,
        blank=True,
        default="",
        db_default="",
        help_text="Delays, bounces and failures: why, as the receiver's reply codes say",
    )
    fix_check = models.CharField(
        max_length=16,
        blank=True,
        default="",
        db_default="",
        help_text="An authentication refusal: the readiness check to fix (manage.py check_readiness DOMAIN)",
    )
    complaint_authenticated = models.BooleanField(
        null=True,
        blank=True,
        help_text="Complaints: from a trusted feedback loop (messaging/inbound/feedback_loops.py); "
        "unauthenticated ones count toward the safeguard only with MAILSERVICE_COMPLAINTS_UNAUTHENTICATED=count",
    )
    reason = models.CharField(
        max_length=20,
        choices=RefusalReason.choices,
        blank=True,
        default="",
        db_default="",
        help_text="Delays, bounces and failures: why, as an application acts on it (docs/webhooks.md)",
    )
    # The webhook outbox: NULL until webhooks/services.py (`events_fan_out`) has turned the event into
    # deliveries. Every INSERT leaves it NULL, the hand-written ones included, so no event escapes the outbox.
    published_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [
            # soft-bounce streaks: an address's recent soft bounces (messaging.inbound.services)
            models.Index(
                fields=["recipient", "created_at"],
                condition=models.Q(type="soft_bounced"),
                name="event_soft_bounce_idx",
            ),
            # the console's messages by refusal reason (messaging/admin/messages.py, RefusalReasonFilter)
            # and a domain's refusal health (messaging/selectors.py, domain_refusal_health)
            models.Index(
                fields=["reason", "created_at", "message"], condition=~models.Q(reason=""), name="event_reason_idx"
            ),
            # webhooks fan-out: the events still in the outbox, oldest first
            models.Index(fields=["id"], condition=models.Q(published_at__isnull=True), name="event_outbox_idx"),
            # GET /v1/events: a domain's side, oldest first (keyset on created_at, id)
            models.Index(fields=["domain", "is_test", "created_at", "id"], name="event_stream_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id} {self.type}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.domain_id is None:
            self.domain_id, self.is_test = self.message.domain_id, self.message.is_test
        super().save(*args, **kwargs)

    @property
    def public_id(self) -> str:
        return event_public_id(pk=self.pk, created_at=self.created_at)


def event_public_id(*, pk: int, created_at: datetime) -> str:
    """An event's public id (the webhook's `webhook-id`, the API's Event `id`): derived, not stored, so every
    writer's INSERT stays as it is. The creation time in front, as in timed public ids, then a keyed digest
    of the row's id, so ids neither repeat nor tell how many events the service holds."""
    digest = salted_hmac("messaging.event_public_id", str(pk), algorithm="sha256").digest()
    return derived_timed_public_id("evt", at=created_at, digest=digest)

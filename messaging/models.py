from dataclasses import asdict, dataclass
from datetime import timedelta

from django.db import models
from django.db.models.functions import Upper
from django.utils import timezone

from domains.models import Domain
from mailservice.ids import public_id_time, timed_public_id
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
    DELIVERED = "delivered"
    RECIPIENT_REJECTED = "recipient_rejected"
    BOUNCED = "bounced", "bounced (permanent failure)"
    SOFT_BOUNCED = "soft_bounced", "soft bounced (the relay gave up on a temporary failure)"
    DELAYED = "delayed", "delayed (DSN reported a delay)"
    FAILED = "failed"
    SUPPRESSED = "suppressed"
    COMPLAINED = "complained"
    RECEIVED = "received"


class BounceType(models.TextChoices):
    HARD = "hard"  # permanent: the address does not take mail
    SOFT = "soft"  # temporary: the relay gave up on it, or refused it with a 4xx


class ReplyCause(models.TextChoices):
    """Why a receiver refused or deferred mail, read from its reply's codes (messaging/reply_causes.py)."""

    AUTHENTICATION = "authentication"  # SPF, DKIM, DMARC, alignment or PTR failed: `fix_check` names the check
    REPUTATION = "reputation"  # the sending address or domain is blocklisted or has a poor reputation
    RATE_LIMITED = "rate_limited"  # too much mail, too fast: the receiver throttles
    POLICY = "policy"  # another of the receiver's rules (RFC 3463 X.7.x) refused it
    MAILBOX = "mailbox"  # the recipient's address or mailbox (RFC 3463 X.1.x, X.2.x)
    OTHER = "other"  # a failure no known code explains


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

    def row(self, message: "Message") -> "MessageEvent":
        return MessageEvent(message=message, **asdict(self))


class MessageEvent(models.Model):
    """One step in a message's history: shown to operators, never through the API."""

    # No foreign key in the database: on PostgreSQL messages are partitioned by day and retention drops
    # whole partitions (messaging.retention), which a key into them would forbid. Deleting a message
    # through the ORM still deletes its events; the row purge deletes them itself.
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="events", db_constraint=False)
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
    # The webhook outbox: NULL until webhooks/fanout.py has turned the event into deliveries. Every
    # INSERT leaves it NULL, the hand-written ones included, so no event escapes the outbox.
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
            # webhooks fan-out: the events still in the outbox, oldest first
            models.Index(fields=["id"], condition=models.Q(published_at__isnull=True), name="event_outbox_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id} {self.type}"


class IdempotencyState(models.TextChoices):
    IN_FLIGHT = "in_flight"
    DONE = "done"


class IdempotencyKey(models.Model):
    """An `Idempotency-Key` of POST /v1/send, per domain and sandbox: the first request's body hash
    and, once it succeeded, its response, replayed to every retry until `expires_at`."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="+")
    is_test = models.BooleanField(
        default=False, help_text="Used by a test key: a live key's request with the same key is another request"
    )
    key = models.CharField(max_length=256)
    request_hash = models.CharField(max_length=64, help_text="SHA-256 of the canonical JSON body")
    state = models.CharField(max_length=10, choices=IdempotencyState.choices)
    response = models.JSONField(null=True, blank=True)
    expires_at = models.DateTimeField(help_text="In flight: when an abandoned request frees the key; done: +24 h")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The sandbox is part of the scope: a test key's key never replays, or blocks, a live send.
            models.UniqueConstraint(fields=["domain", "is_test", "key"], name="idempotency_key_unique_per_sandbox")
        ]
        indexes = [
            # idempotency_purge: expired keys
            models.Index(fields=["expires_at"], name="idempotency_expiry_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.key} ({self.domain_id}{', test' if self.is_test else ''}, {self.state})"


class SuppressionReason(models.TextChoices):
    BOUNCE = "bounce"
    SOFT_BOUNCE = "soft_bounce", "soft bounces (expires)"
    COMPLAINT = "complaint"
    MANUAL = "manual"


class Suppression(models.Model):
    """A recipient address a domain must no longer contact."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="suppressions")
    address = models.CharField(
        max_length=320, help_text="The address as suppressions compare it: case-folded local part, A-label domain"
    )
    reason = models.CharField(max_length=16, choices=SuppressionReason.choices)
    # No foreign key in the database (messages are partitioned, see MessageEvent.message): retention sets
    # it to NULL before a message goes, by row or by partition.
    source_message = models.ForeignKey(
        Message, on_delete=models.SET_NULL, null=True, blank=True, related_name="+", db_constraint=False
    )
    detail = models.TextField(blank=True)
    expires_at = models.DateTimeField(
        null=True, blank=True, help_text="Empty: permanent. Soft-bounce suppressions lapse at this time"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [models.UniqueConstraint(fields=["domain", "address"], name="suppression_unique_per_domain")]

    def __str__(self) -> str:
        return f"{self.address} ({self.domain}, {self.reason})"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()


class DailyMessageCount(models.Model):
    """Messages per domain, UTC day of creation, direction and status, of those the retention purge deleted.

    Written by the purge (messaging.retention) in the transaction that deletes the messages, so
    every message is counted either here or by its own row, never both: the console's figures
    add the two and survive the purge. Only final statuses reach it (a message is purged weeks
    after its last change).
    """

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    direction = models.CharField(max_length=8, choices=Direction.choices)
    status = models.CharField(max_length=10, choices=Status.choices)
    count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # also serves the console's rates: a domain's counts since a day
            models.UniqueConstraint(
                fields=["domain", "day", "direction", "status"], name="daily_message_count_one_row"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.domain_id} {self.day} {self.direction} {self.status}: {self.count}"


class CountedEvent(models.TextChoices):
    """What the console's dashboard counts: the message events of these types (messaging/aggregates.py)."""

    SENT = "accepted", "sent"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"
    RECEIVED = "received"


class StatusCount(models.Model):
    """Message events of one type for one domain in one period (messaging/aggregates.py keeps them)."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=CountedEvent.choices)
    count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class HourlyStatusCount(StatusCount):
    """One UTC hour's counts; kept 15 days (the dashboard's 24 hours)."""

    hour = models.DateTimeField()

    class Meta:
        constraints = [
            # The rollup's upsert (ON CONFLICT) and the dashboard's range read by hour.
            models.UniqueConstraint(fields=["hour", "domain", "kind"], name="hourly_status_count_unique")
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.domain_id} {self.kind}: {self.count}"


class DailyStatusCount(StatusCount):
    """One UTC day's counts (the dashboard's 14 days and rates)."""

    day = models.DateField()

    class Meta:
        constraints = [
            # The rollup's upsert (ON CONFLICT) and the dashboard's range read by day.
            models.UniqueConstraint(fields=["day", "domain", "kind"], name="daily_status_count_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.domain_id} {self.kind}: {self.count}"


class StatusCountRollup(models.Model):
    """The one row (pk=1) recording how far the event counts have been rolled up: the last event id counted."""

    last_event_id = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"rolled up to event {self.last_event_id}"


class TlsPolicyType(models.TextChoices):
    """RFC 8460 §4.4 policy-type: the policy a direct-delivery session was held to."""

    STS = "sts", "MTA-STS"
    TLSA = "tlsa", "DANE (TLSA)"
    NO_POLICY = "no-policy-found", "no policy found"


class TlsSessionCount(models.Model):
    """Direct-delivery SMTP sessions of one UTC day, counted per TLS-RPT report line (RFC 8460):
    one row per policy applied, MX host, receiving address and result (empty: success).

    Written by one UPSERT per session (messaging/outbound/tls_reports.py), read by the daily report."""

    day = models.DateField(help_text="The UTC day of the sessions")
    policy_domain = models.CharField(max_length=253, help_text="The recipient domain whose policy applied (A-label)")
    policy_type = models.CharField(max_length=16, choices=TlsPolicyType.choices)
    policy_strings = models.JSONField(default=list, help_text="The applied policy, one string per line")
    policy_hash = models.CharField(max_length=64, editable=False, help_text="SHA-256 of the policy strings")
    mx_host = models.CharField(max_length=253, blank=True)
    receiving_ip = models.CharField(max_length=45, blank=True)
    result_type = models.CharField(
        max_length=40, blank=True, help_text="An RFC 8460 §4.3 result type; empty for a successful session"
    )
    sessions = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The UPSERT's conflict target; its index also serves the report's reads: a day's policy
            # domains (`day`), then one domain's rows (`day`, `policy_domain`).
            models.UniqueConstraint(
                fields=[
                    "day",
                    "policy_domain",
                    "policy_type",
                    "policy_hash",
                    "mx_host",
                    "receiving_ip",
                    "result_type",
                ],
                name="tls_session_count_key",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.policy_domain} {self.policy_type} {self.result_type or 'success'}: {self.sessions}"


class TlsReportStatus(models.TextChoices):
    SENDING = "sending"
    SENT = "sent"
    FAILED = "failed"


class TlsReportSubmission(models.Model):
    """One day's TLS report of a policy domain to one of its `rua` addresses: sent once.

    A `mailto:` report is recorded `sent` in the transaction that stores its message. An `https:` one is
    claimed (`sending`) before the POST and marked after it; a `failed` one is tried again by the next
    run, one left `sending` by a killed run is not (at most once)."""

    day = models.DateField(help_text="The UTC day the report covers")
    policy_domain = models.CharField(max_length=253)
    rua = models.CharField(max_length=500, help_text="Where the report went: a mailto: or https: URI")
    report_id = models.CharField(max_length=100)
    status = models.CharField(max_length=8, choices=TlsReportStatus.choices)
    detail = models.TextField(blank=True, help_text="The message id, the HTTP status, or why it failed")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # The claim: a second run for the same day finds the row and sends nothing.
            models.UniqueConstraint(fields=["day", "policy_domain", "rua"], name="tls_report_submission_once"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.policy_domain} → {self.rua}: {self.status}"


class AggregateKind(models.TextChoices):
    DMARC = "dmarc", "DMARC aggregate report"
    TLS = "tls", "SMTP TLS report"


class ReportMailOutcome(models.TextChoices):
    STORED = "stored", "stored as a report"
    DUPLICATE = "duplicate", "already stored (the reporter sent it again)"
    REFUSED = "refused", "not stored as a report (see the reason)"


class ReportMail(models.Model):
    """A message received at `dmarc-reports@` or `tls-reports@` the return-path domain, kept whole with
    what became of it: a report that cannot be read, or is about a domain the service does not know,
    stays here with the reason (it was answered 250, so the reporter does not retry it)."""

    kind = models.CharField(max_length=8, choices=AggregateKind.choices)
    outcome = models.CharField(max_length=10, choices=ReportMailOutcome.choices)
    reason = models.TextField(blank=True, help_text="Why it was not stored as a report, for outcome 'refused'")
    domain = models.ForeignKey(
        Domain, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The domain it reports on"
    )
    envelope_from = models.CharField(max_length=320, blank=True)
    subject = models.CharField(max_length=998, blank=True)
    raw = models.BinaryField(help_text="The message as received")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [
            # The console's list of report mail, newest first, filtered by outcome.
            models.Index(fields=["outcome", "-created_at"], name="report_mail_outcome_idx"),
            # Retention's purge of what is past MAILSERVICE_RETENTION_DAYS (messaging/retention.py).
            models.Index(fields=["created_at"], name="report_mail_created_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} from <{self.envelope_from}>: {self.outcome}"


class DmarcReport(models.Model):
    """One DMARC aggregate report about a domain: one reporter's view of one period."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="dmarc_reports")
    org_name = models.CharField(max_length=255, help_text="The reporter, as it names itself")
    report_id = models.CharField(max_length=255)
    begin = models.DateTimeField()
    end = models.DateTimeField(help_text="End of the period; summaries count reports by it")
    policy = models.CharField(max_length=16, blank=True, help_text="The published p= the reporter saw")
    # The mail goes with retention (messaging.retention.report_data_purge); the report stays.
    mail = models.ForeignKey(
        ReportMail, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The mail it came in"
    )
    published_at = models.DateTimeField(
        null=True, blank=True, help_text="When its domain.dmarc_report webhook event was fanned out"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # A report sent again (reporters retry, forward, resend) is counted once.
            models.UniqueConstraint(fields=["domain", "org_name", "report_id"], name="dmarc_report_once"),
        ]
        indexes = [
            # dmarc_summary and the console's chart: a domain's reports ending within the last N days.
            models.Index(fields=["domain", "end"], name="dmarc_report_domain_end_idx"),
            # The webhooks' fan-out: reports not yet published, oldest first.
            models.Index(
                fields=["id"], condition=models.Q(published_at__isnull=True), name="dmarc_report_unpublished_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.org_name} {self.report_id} about {self.domain_id}"


class DmarcRecord(models.Model):
    """One row of a DMARC report: the messages from one source address with one set of results."""

    report = models.ForeignKey(DmarcReport, on_delete=models.CASCADE, related_name="records")
    source_ip = models.GenericIPAddressField()
    count = models.PositiveIntegerField(help_text="Messages")
    disposition = models.CharField(max_length=16, blank=True, help_text="none, quarantine or reject")
    dkim_aligned = models.BooleanField(help_text="DKIM passed and aligned with the From domain")
    spf_aligned = models.BooleanField(help_text="SPF passed and aligned with the From domain")
    header_from = models.CharField(max_length=255, blank=True)
    dkim_result = models.CharField(max_length=16, blank=True, help_text="The first DKIM result, aligned or not")
    spf_result = models.CharField(max_length=16, blank=True)
    reverse_name = models.CharField(max_length=253, blank=True, help_text="The source's PTR name, when it had one")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.source_ip}: {self.count}"


class TlsReport(models.Model):
    """One SMTP TLS report's sessions towards one domain, as its summary states them."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="tls_reports")
    org_name = models.CharField(max_length=255)
    report_id = models.CharField(max_length=255)
    begin = models.DateTimeField()
    end = models.DateTimeField()
    successful_sessions = models.PositiveBigIntegerField()
    failed_sessions = models.PositiveBigIntegerField()
    # The mail goes with retention (messaging.retention.report_data_purge); the report stays.
    mail = models.ForeignKey(
        ReportMail, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", help_text="The mail it came in"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["domain", "org_name", "report_id"], name="tls_report_once"),
        ]
        indexes = [
            # tls_summary: a domain's reports ending within the last N days.
            models.Index(fields=["domain", "end"], name="tls_report_domain_end_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.org_name} {self.report_id} about {self.domain_id}"


class TlsReportFailure(models.Model):
    """A TLS report's failed sessions of one result type (RFC 8460 §4.3), summed over its details."""

    report = models.ForeignKey(TlsReport, on_delete=models.CASCADE, related_name="failures")
    result_type = models.CharField(max_length=64)
    sessions = models.PositiveBigIntegerField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["report", "result_type"], name="tls_report_failure_once"),
        ]

    def __str__(self) -> str:
        return f"{self.result_type}: {self.sessions}"

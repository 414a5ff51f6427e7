from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

from mailservice.encryption import EncryptedSecretField
from mailservice.ids import public_id, random_token


def _domain_public_id() -> str:
    return public_id("dom")


def _verification_token() -> str:
    return random_token(32)


class Domain(models.Model):
    public_id = models.CharField(max_length=40, unique=True, default=_domain_public_id, editable=False)
    name = models.CharField(max_length=253, unique=True, help_text="The sending domain, lower-case, e.g. example.com")

    verified = models.BooleanField(default=False)
    verified_at = models.DateTimeField(null=True, blank=True)
    verified_by = models.CharField(max_length=150, blank=True, help_text="Who verified it: DNS check or an operator")
    verification_token = models.CharField(max_length=64, default=_verification_token, editable=False)

    sending_paused = models.BooleanField(default=False, help_text="While on, sends get 503 and nothing is dispatched")
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True)
    pause_reason = models.CharField(max_length=500, blank=True)
    auto_paused = models.BooleanField(default=False, help_text="Paused by a bounce or complaint safeguard")

    daily_allowance = models.PositiveIntegerField(
        null=True, blank=True, help_text="Messages per UTC day; empty means unlimited"
    )

    retention_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Days this domain's messages are kept; empty means MAILSERVICE_RETENTION_DAYS",
    )
    source_pool = models.ForeignKey(
        "SourcePool",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="domains",
        help_text="Direct delivery: the source addresses its mail leaves from; empty means all of them",
    )
    dispatch_weight = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Share of dispatch while several domains have mail queued: a domain of weight 2 gets twice "
        "the turns of a domain of weight 1",
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=models.Q(name=Lower("name")), name="domain_name_lowercase"),
            models.CheckConstraint(condition=models.Q(dispatch_weight__gte=1), name="domain_dispatch_weight_positive"),
        ]

    def __str__(self) -> str:
        return self.name


class DkimKeyState(models.TextChoices):
    PENDING = "pending", "pending (publish its record, then Check DNS)"
    ACTIVE = "active", "active (signing)"
    RETIRING = "retiring", "retiring (keep its record published)"


class DkimKey(models.Model):
    """A domain's DKIM key under one selector: pending until its DNS record is found (or an operator
    forces it), then active (the one that signs), then retiring for a grace period, then deleted."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="dkim_keys")
    selector = models.CharField(max_length=63)
    state = models.CharField(max_length=10, choices=DkimKeyState.choices)
    private_key = EncryptedSecretField(help_text="PEM encrypted under MAILSERVICE_ENCRYPTION_KEYS; never shown")
    public_key = models.TextField(help_text="Base64 DER, the p= value of the DKIM record")

    verified_at = models.DateTimeField(null=True, blank=True, help_text="When a DNS check found its record")
    forced_by = models.CharField(
        max_length=150, blank=True, help_text="The operator who made it sign before its record was found"
    )
    forced_at = models.DateTimeField(null=True, blank=True)
    activated_at = models.DateTimeField(null=True, blank=True)
    retire_after = models.DateTimeField(
        null=True, blank=True, help_text="Retiring: its record must stay published until then; the key is deleted after"
    )

    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["domain", "created_at"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "selector"], name="dkim_key_selector_unique_per_domain"),
            # Dispatch signs with "the" active key of a domain; a rotation waits on "the" pending one.
            models.UniqueConstraint(
                fields=["domain"], condition=models.Q(state="active"), name="dkim_key_one_active_per_domain"
            ),
            models.UniqueConstraint(
                fields=["domain"], condition=models.Q(state="pending"), name="dkim_key_one_pending_per_domain"
            ),
            models.CheckConstraint(
                condition=~models.Q(state="retiring") | models.Q(retire_after__isnull=False),
                name="dkim_key_retiring_has_a_date",
            ),
        ]
        indexes = [
            # dkim_keys_retire: retiring keys whose grace period is over (the beat task's scan).
            models.Index(fields=["retire_after"], condition=models.Q(state="retiring"), name="dkim_key_retiring_idx"),
        ]

    def __str__(self) -> str:
        return f"DKIM key {self.selector} ({self.state})"


class SendingControl(models.Model):
    """The one global sending switch (a single row, pk=1)."""

    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_by = models.CharField(max_length=150, blank=True)
    pause_reason = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=models.Q(pk=1), name="sending_control_single_row")]

    def __str__(self) -> str:
        return "Global sending: paused" if self.paused else "Global sending: on"


class DailyUsage(models.Model):
    """Messages accepted per domain per UTC day, the counter the daily allowance is checked against."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="daily_usage")
    day = models.DateField()
    sent_count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["domain", "day"], name="daily_usage_one_row_per_day")]

    def __str__(self) -> str:
        return f"{self.domain} {self.day}: {self.sent_count}"


class DomainReadiness(models.Model):
    """The last readiness check of a domain (messaging/readiness/): kept so the
    console shows it without asking DNS on every view; the daily check and `check_readiness` replace it."""

    domain = models.OneToOneField(Domain, on_delete=models.CASCADE, related_name="readiness")
    checks = models.JSONField(default=list, help_text='[{"id", "status", "detail"}], in the order checked')
    checked_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"Readiness of {self.domain} at {self.checked_at:%Y-%m-%d %H:%M}"


class SourcePool(models.Model):
    """A named subset of the source addresses (MAILSERVICE_SOURCE_ADDRESSES) that a domain's direct
    delivery leaves from, so that one domain's reputation is kept apart from another's."""

    name = models.CharField(max_length=64, unique=True)
    addresses = models.JSONField(
        default=list, help_text="Addresses from MAILSERVICE_SOURCE_ADDRESSES, one per line in the form"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SourceAddress(models.Model):
    """The warm-up state of one source address (rows are made for the configured addresses as they are used
    or listed). Its warm-up day is counted from `warmup_started`, set on the first UTC day it sends while
    MAILSERVICE_WARMUP is on; an address with a reputation of its own is marked `warm`."""

    address = models.GenericIPAddressField(unique=True)
    warm = models.BooleanField(
        default=False, help_text="Already warm: it sends without warm-up caps (e.g. it had a reputation before)"
    )
    warmup_started = models.DateField(
        null=True,
        blank=True,
        help_text="The UTC day its warm-up began (day 1); set on its first send. An earlier date skips days ahead",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["address"]
        verbose_name_plural = "source addresses"

    def __str__(self) -> str:
        return self.address

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models.functions import Lower

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

    dispatch_weight = models.PositiveSmallIntegerField(
        default=1,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Share of dispatch while several domains have mail queued: a domain of weight 2 gets twice "
        "the turns of a domain of weight 1",
    )

    dkim_selector = models.CharField(max_length=63, default="mail")
    dkim_private_key = models.TextField(blank=True, help_text="PEM; never shown through the API or list pages")
    dkim_public_key = models.TextField(blank=True, help_text="Base64 DER, the p= value of the DKIM record")

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

"""Addresses a domain does not send to: hard bounces, soft bounces (for a while), complaints and the
operator's own (messaging/suppressions.py)."""

from django.db import models
from django.utils import timezone

from domains.models import Domain
from messaging.models.messages import Message


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
    is_test = models.BooleanField(
        default=False,
        verbose_name="sandbox",
        help_text="The sandbox's list: managed with test keys, checked only for test keys' sends",
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
        constraints = [
            # One entry per address and side; also GET /v1/suppressions/{email} and ?email=, and dispatch's check.
            models.UniqueConstraint(fields=["domain", "is_test", "address"], name="suppression_unique_per_domain")
        ]
        indexes = [
            # GET /v1/suppressions: newest first within a domain's side (keyset on created_at, address)
            models.Index(fields=["domain", "is_test", "-created_at", "-address"], name="suppression_list_idx"),
            # GET /v1/suppressions?reason=…
            models.Index(
                fields=["domain", "is_test", "reason", "-created_at", "-address"], name="suppression_list_reason_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.address} ({self.domain}, {self.reason})"

    @property
    def expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()

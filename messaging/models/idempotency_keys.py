"""The Idempotency-Key of a send, kept for 24 hours with its first response (messaging/idempotency.py)."""

from django.db import models

from domains.models import Domain


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

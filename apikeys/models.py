from django.db import models

from domains.models import Domain
from mailservice.ids import public_id

KEY_PREFIX_LENGTH = 12  # characters of a key's prefix after `ms_`: the part that finds its row


def _key_public_id() -> str:
    return public_id("key")


class Permission(models.TextChoices):
    SEND = "email.send", "email.send"
    READ = "email.read", "email.read"
    SUPPRESSIONS_WRITE = "suppressions.write", "suppressions.write"


class ApiKey(models.Model):
    """A bearer key bound to one domain. Only a digest of the secret is stored.

    The full key reads `ms_<prefix>_<secret>`; the prefix is not secret and finds the row,
    the SHA-256 digest of the whole key is compared in constant time.
    """

    public_id = models.CharField(max_length=40, unique=True, default=_key_public_id, editable=False)
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, unique=True, editable=False, help_text="Identifies the key; not secret")
    secret_hash = models.CharField(max_length=64, editable=False)
    can_send = models.BooleanField(default=True, verbose_name="email.send")
    can_read = models.BooleanField(default=True, verbose_name="email.read")
    can_write_suppressions = models.BooleanField(
        default=False, verbose_name="suppressions.write", help_text="PUT and DELETE /v1/suppressions/{email}"
    )
    is_test = models.BooleanField(
        default=False,
        verbose_name="test key",
        help_text="Sandbox: sends are checked and stored but never reach SMTP; outcomes are simulated",
    )
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "API key"
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name or self.public_id} (ms_{self.prefix}_…){' [test]' if self.is_test else ''}"

    @property
    def permissions(self) -> list[str]:
        granted = (
            (Permission.SEND, self.can_send),
            (Permission.READ, self.can_read),
            (Permission.SUPPRESSIONS_WRITE, self.can_write_suppressions),
        )
        return [perm for perm, allowed in granted if allowed]

    def has_permission(self, permission: str) -> bool:
        return permission in self.permissions

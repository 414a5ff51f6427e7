"""The per-domain suppression list: recipient addresses a domain must no longer contact.

Hard bounces and complaints add to it automatically and for good (messaging.inbound); a streak of
soft bounces adds an entry that lapses at `expires_at`. Operators list, add and remove entries
with `manage.py suppressions` or the console. Dispatch skips recipients with an active entry.
"""

from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from domains.models import Domain
from mailservice.errors import ErrorCode, NotFound, ValidationFailed
from mailservice.mailbox import InvalidAddress, is_mailbox, parse_address
from messaging.models import Message, Suppression, SuppressionReason


def normalize_address(value: str) -> str:
    """The suppression key of a Mailbox (`a@example.org` or `Name <a@example.org>`): `Address.key`,
    the form dispatch compares recipients under, so no other spelling of it gets past the list."""
    candidate = value.strip()
    if not is_mailbox(candidate):
        raise ValidationFailed(f"{value!r} is not an email address", code=ErrorCode.INVALID_ADDRESS)
    try:
        return parse_address(candidate).key
    except InvalidAddress as exc:
        raise ValidationFailed(f"{value!r}: {exc}", code=ErrorCode.INVALID_ADDRESS) from None


def suppression_add(
    *,
    domain: Domain,
    address: str,
    reason: SuppressionReason,
    source_message: Message | None = None,
    detail: str = "",
    expires_at: datetime | None = None,
) -> tuple[Suppression, bool]:
    """Suppress an address for a domain, for good or until `expires_at`; (the entry, whether it is new).

    An existing entry is kept as it is, unless the new one lasts longer (a hard bounce after a
    soft-bounce suppression makes it permanent; a new soft-bounce streak renews a lapsed one).
    """
    fields = {"reason": reason, "source_message": source_message, "detail": detail[:2000], "expires_at": expires_at}
    entry, created = Suppression.objects.get_or_create(
        domain=domain, address=normalize_address(address), defaults=fields
    )
    if not created and entry.expires_at is not None and (expires_at is None or expires_at > entry.expires_at):
        for name, value in fields.items():
            setattr(entry, name, value)
        entry.save(update_fields=[*fields, "updated_at"])
    return entry, created


def active_suppressions() -> QuerySet[Suppression]:
    """Entries in force now: permanent ones and those not yet lapsed."""
    return Suppression.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def suppression_remove(*, domain: Domain, address: str) -> str:
    """Let the domain contact the address again; returns the address as it was listed."""
    normalized = normalize_address(address)
    deleted, _ = Suppression.objects.filter(domain=domain, address=normalized).delete()
    if not deleted:
        raise NotFound(f"{normalized} is not suppressed for {domain.name}", code=ErrorCode.SUPPRESSION_NOT_FOUND)
    return normalized


def suppression_list(*, domain: Domain) -> QuerySet[Suppression]:
    """Newest first."""
    return Suppression.objects.filter(domain=domain).select_related("source_message").order_by("-created_at", "-id")

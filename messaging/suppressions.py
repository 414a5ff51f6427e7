"""The per-domain suppression list: recipient addresses a domain must no longer contact.

Hard bounces and complaints add to it automatically (messaging.inbound); operators list, add and
remove entries with `manage.py suppressions` or the console. Dispatch skips suppressed recipients.
"""

from django.db.models import QuerySet

from domains.models import Domain
from mailservice.errors import ErrorCode, NotFound, ValidationFailed
from mailservice.mailbox import address_of, is_mailbox
from messaging.models import Message, Suppression, SuppressionReason


def normalize_address(value: str) -> str:
    """The lower-case bare address of a Mailbox (`a@example.org` or `Name <a@example.org>`)."""
    candidate = value.strip()
    if not is_mailbox(candidate):
        raise ValidationFailed(f"{value!r} is not an email address", code=ErrorCode.INVALID_ADDRESS)
    return address_of(candidate).lower()


def suppression_add(
    *,
    domain: Domain,
    address: str,
    reason: SuppressionReason,
    source_message: Message | None = None,
    detail: str = "",
) -> tuple[Suppression, bool]:
    """Suppress an address for a domain; (the entry, whether it is new). An existing entry is kept as it is."""
    return Suppression.objects.get_or_create(
        domain=domain,
        address=normalize_address(address),
        defaults={"reason": reason, "source_message": source_message, "detail": detail[:2000]},
    )


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

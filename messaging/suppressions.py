"""The per-domain suppression list: recipient addresses a domain must no longer contact.

Hard bounces and complaints add to it automatically (messaging.inbound); operators list, add and
remove entries with `manage.py suppressions` or the console. Dispatch skips suppressed recipients.
"""

from django.db.models import QuerySet

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

"""The per-domain suppression list: recipient addresses a domain must no longer contact.

Hard bounces and complaints add to it automatically and for good (messaging.inbound); a streak of
soft bounces adds an entry that lapses at `expires_at`. Operators list, add and remove entries
with `manage.py suppressions` or the console, applications through /v1/suppressions. Dispatch skips
recipients with an active entry. A domain has two lists: the live one, and the sandbox's (`is_test`),
which test keys manage and which only test keys' sends are checked against.
"""

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Q, QuerySet
from django.utils import timezone

from domains.models import Domain
from mailservice.errors import ErrorCode, NotFound, ValidationFailed
from mailservice.mailbox import MAX_LENGTH, InvalidAddress, is_mailbox, parse_address
from messaging.cursors import cursor_decode, cursor_encode
from messaging.models import Message, Suppression, SuppressionReason

# The API's names of the reasons; the stored `bounce` predates the soft-bounce entries.
REASON_WIRE = {
    SuppressionReason.BOUNCE: "hard_bounce",
    SuppressionReason.SOFT_BOUNCE: "soft_bounce",
    SuppressionReason.COMPLAINT: "complaint",
    SuppressionReason.MANUAL: "manual",
}
REASON_OF_WIRE = {wire: reason for reason, wire in REASON_WIRE.items()}
MAX_API_DETAIL = 500
_CURSOR_SALT = "messaging.suppression_page.cursor"


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


def api_address(value: str) -> str:
    """The suppression key of an address named by an API request (the path's `{email}`, the `email` filter):
    a ValidationError, never the operators' InvalidAddress, when it is not a Mailbox."""
    if len(value) > MAX_LENGTH:
        raise ValidationFailed(f"email: an address is at most {MAX_LENGTH} characters")
    try:
        if value != value.strip():  # normalize_address forgives the operators' stray spaces; a request's are refused
            raise ValidationFailed("surrounding whitespace")
        return normalize_address(value)
    except ValidationFailed:
        raise ValidationFailed(
            "email: must be an address like name@example.com (3 to 320 characters, URL-encoded in a path)"
        ) from None


def suppression_add(
    *,
    domain: Domain,
    address: str,
    reason: SuppressionReason,
    source_message: Message | None = None,
    detail: str = "",
    expires_at: datetime | None = None,
    is_test: bool = False,
) -> tuple[Suppression, bool]:
    """Suppress an address for a domain, for good or until `expires_at`; (the entry, whether it is new).

    An existing entry is kept as it is, unless the new one lasts longer (a hard bounce after a
    soft-bounce suppression makes it permanent; a new soft-bounce streak renews a lapsed one).
    """
    fields = {"reason": reason, "source_message": source_message, "detail": detail[:2000], "expires_at": expires_at}
    entry, created = Suppression.objects.get_or_create(
        domain=domain, is_test=is_test, address=normalize_address(address), defaults=fields
    )
    if not created and entry.expires_at is not None and (expires_at is None or expires_at > entry.expires_at):
        for name, value in fields.items():
            setattr(entry, name, value)
        entry.save(update_fields=[*fields, "updated_at"])
    return entry, created


def active_suppressions() -> QuerySet[Suppression]:
    """Entries in force now: permanent ones and those not yet lapsed."""
    return Suppression.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def suppression_remove(*, domain: Domain, address: str, is_test: bool = False) -> str:
    """Let the domain contact the address again; returns the address as it was listed."""
    normalized = normalize_address(address)
    deleted, _ = Suppression.objects.filter(domain=domain, is_test=is_test, address=normalized).delete()
    if not deleted:
        raise NotFound(f"{normalized} is not suppressed for {domain.name}", code=ErrorCode.SUPPRESSION_NOT_FOUND)
    return normalized


def suppression_list(*, domain: Domain, is_test: bool = False) -> QuerySet[Suppression]:
    """Newest first."""
    mine = Suppression.objects.filter(domain=domain, is_test=is_test).select_related("source_message")
    # Of the message, only its id: a join reads no body.
    mine = mine.only("address", "reason", "detail", "expires_at", "created_at", "source_message__public_id")
    return mine.order_by("-created_at", "-address")


def suppression_get(*, domain: Domain, address: str, is_test: bool) -> Suppression:
    """The entry of an address (a key, as `api_address` makes it) on the domain's list of that side."""
    entry = suppression_list(domain=domain, is_test=is_test).filter(address=address).first()
    if entry is None:
        raise NotFound(f"{address} is not suppressed")
    return entry


def suppression_add_manual(*, domain: Domain, address: str, is_test: bool, detail: str = "") -> Suppression:
    """PUT /v1/suppressions/{email}: a `manual` entry, or the existing entry unchanged while it is in force
    (a lapsed soft-bounce entry becomes the manual one asked for: left as it is, it would suppress nothing)."""
    fields = {"reason": SuppressionReason.MANUAL, "detail": detail[:MAX_API_DETAIL], "expires_at": None}
    entry, created = Suppression.objects.get_or_create(domain=domain, is_test=is_test, address=address, defaults=fields)
    if not created and entry.expired:
        Suppression.objects.filter(pk=entry.pk).update(**fields, source_message=None, updated_at=timezone.now())
        entry.refresh_from_db()
    return entry


def suppression_delete(*, domain: Domain, address: str, is_test: bool) -> None:
    """DELETE /v1/suppressions/{email}: the next send to the address goes out."""
    deleted, _ = Suppression.objects.filter(domain=domain, is_test=is_test, address=address).delete()
    if not deleted:
        raise NotFound(f"{address} is not suppressed")


@dataclass(frozen=True)
class SuppressionPage:
    suppressions: list[Suppression]
    has_more: bool
    next_cursor: str | None


def suppression_page(
    *, domain: Domain, is_test: bool, limit: int, after: str | None, reason: str | None, address: str | None
) -> SuppressionPage:
    """GET /v1/suppressions: newest first by (created_at, address), keyset-paginated on suppression_list_idx
    (suppression_list_reason_idx with a reason; the unique constraint's index with an address)."""
    entries = suppression_list(domain=domain, is_test=is_test)
    if reason is not None:
        entries = entries.filter(reason=REASON_OF_WIRE[reason])
    if address is not None:
        entries = entries.filter(address=address)
    owner, filters = f"{domain.public_id}:{int(is_test)}", f"{reason or ''}:{address or ''}"
    if after:
        created, last = cursor_decode(salt=_CURSOR_SALT, cursor=after, owner=owner, filters=filters)
        if not isinstance(last, str):
            raise ValidationFailed("after: invalid cursor", code=ErrorCode.INVALID_CURSOR)
        # The redundant created_at <= bound lets PostgreSQL range-scan the index, as message_list does.
        entries = entries.filter(
            Q(created_at__lt=created) | Q(created_at=created, address__lt=last), created_at__lte=created
        )
    page = list(entries[: limit + 1])
    has_more = len(page) > limit
    page = page[:limit]
    next_cursor = None
    if has_more:
        next_cursor = cursor_encode(
            salt=_CURSOR_SALT, owner=owner, filters=filters, moment=page[-1].created_at, key=page[-1].address
        )
    return SuppressionPage(suppressions=page, has_more=has_more, next_cursor=next_cursor)

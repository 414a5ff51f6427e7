from typing import NamedTuple

from django.db.models import IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from domains.models import DailyUsage, DkimKey, DkimKeyState, Domain, DomainReadiness
from mailservice.errors import ErrorCode, ValidationFailed
from mailservice.mailbox import InvalidAddress, canonical_domain


def domain_get_by_name(*, name: str) -> Domain:
    """The domain of any spelling of its name (`bücher.example`, `xn--bcher-kva.example`, `Example.COM.`)."""
    try:
        canonical = canonical_domain(name, trailing_dot=True)
    except InvalidAddress:
        canonical = None
    domain = Domain.objects.filter(name=canonical).first() if canonical else None
    if domain is None:
        raise ValidationFailed(f"No domain named {name}", code=ErrorCode.DOMAIN_NOT_FOUND)
    return domain


def with_sends_today(queryset: QuerySet[Domain]) -> QuerySet[Domain]:
    """Annotate `sends_today` (today's DailyUsage count) in the same query, for list pages."""
    today = DailyUsage.objects.filter(domain=OuterRef("pk"), day=timezone.now().date()).values("sent_count")[:1]
    return queryset.annotate(sends_today=Coalesce(Subquery(today), Value(0), output_field=IntegerField()))


def dkim_keys_published(*, domain: Domain) -> list[DkimKey]:
    """The keys whose records belong in DNS (active, pending, retiring), oldest first; private keys left unread."""
    return list(DkimKey.objects.filter(domain=domain).defer("private_key").order_by("created_at"))


def dkim_signing_selector(*, domain: Domain) -> str | None:
    return domain.dkim_keys.filter(state=DkimKeyState.ACTIVE).values_list("selector", flat=True).first()


class SigningKey(NamedTuple):
    id: int
    selector: str
    encrypted_private_key: str  # decrypted by the signer (messaging/outbound/dkim.py) only


def dkim_signing_keys(*, domain_ids: set[int]) -> dict[int, SigningKey]:
    """{domain id: its active key}, the only keys anything is signed with; one query for a batch."""
    rows = DkimKey.objects.filter(domain_id__in=domain_ids, state=DkimKeyState.ACTIVE)
    return {
        domain_id: SigningKey(pk, selector, private_key)
        for domain_id, pk, selector, private_key in rows.values_list("domain_id", "pk", "selector", "private_key")
    }


def readiness_last(*, domain: Domain) -> DomainReadiness | None:
    """The domain's last readiness check, as stored (no DNS lookup)."""
    return DomainReadiness.objects.filter(domain=domain).first()

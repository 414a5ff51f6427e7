from django.db.models import IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from domains.models import DailyUsage, Domain
from mailservice.errors import ErrorCode, ValidationFailed


def domain_get_by_name(*, name: str) -> Domain:
    domain = Domain.objects.filter(name=name.strip().rstrip(".").lower()).first()
    if domain is None:
        raise ValidationFailed(f"No domain named {name}", code=ErrorCode.DOMAIN_NOT_FOUND)
    return domain


def with_sends_today(queryset: QuerySet[Domain]) -> QuerySet[Domain]:
    """Annotate `sends_today` (today's DailyUsage count) in the same query, for list pages."""
    today = DailyUsage.objects.filter(domain=OuterRef("pk"), day=timezone.now().date()).values("sent_count")[:1]
    return queryset.annotate(sends_today=Coalesce(Subquery(today), Value(0), output_field=IntegerField()))

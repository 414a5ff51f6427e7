from django.db.models import IntegerField, OuterRef, QuerySet, Subquery, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from domains.models import DailyUsage, Domain, SendingControl
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


def global_sending_paused() -> bool:
    return SendingControl.objects.filter(pk=1, paused=True).exists()


def with_sends_today(queryset: QuerySet[Domain]) -> QuerySet[Domain]:
    """Annotate `sends_today` (today's DailyUsage count) in the same query, for list pages."""
    today = DailyUsage.objects.filter(domain=OuterRef("pk"), day=timezone.now().date()).values("sent_count")[:1]
    return queryset.annotate(sends_today=Coalesce(Subquery(today), Value(0), output_field=IntegerField()))


def sending_control_state() -> SendingControl:
    """The global switch as stored; an unsaved default (sending on) before anyone has paused."""
    return SendingControl.objects.filter(pk=1).first() or SendingControl(pk=1)

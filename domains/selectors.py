from django.utils import timezone

from domains.models import DailyUsage, Domain, SendingControl
from mailservice.errors import ValidationFailed


def domain_get_by_name(*, name: str) -> Domain:
    domain = Domain.objects.filter(name=name.strip().rstrip(".").lower()).first()
    if domain is None:
        raise ValidationFailed(f"No domain named {name}", code="DomainNotFound")
    return domain


def global_sending_paused() -> bool:
    return SendingControl.objects.filter(pk=1, paused=True).exists()


def sending_paused_for(*, domain: Domain) -> bool:
    return domain.sending_paused or global_sending_paused()


def sends_today(*, domain: Domain) -> int:
    usage = DailyUsage.objects.filter(domain=domain, day=timezone.now().date()).first()
    return usage.sent_count if usage else 0

from celery import shared_task
from django.utils import timezone

from domains.services import dkim_retire_expired


@shared_task(name="domains.dkim_retire")
def dkim_retire_task() -> int:
    return dkim_retire_expired(now=timezone.now())

from typing import Any

from django.utils import timezone

from domains.services import dkim_retire_expired
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Delete retired DKIM keys whose grace period (MAILSERVICE_DKIM_RETIRE_DAYS) is over; beat does this hourly."

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout.write(f"{dkim_retire_expired(now=timezone.now())} retired DKIM key(s) deleted")

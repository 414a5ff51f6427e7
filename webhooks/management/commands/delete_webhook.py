from typing import Any

from django.core.management.base import CommandParser

from mailservice.commands import ServiceCommand
from webhooks.services import endpoint_delete, endpoint_get
from webhooks.targets import redacted_url


class Command(ServiceCommand):
    help = "Delete a webhook endpoint and its deliveries (by its whk_ id)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint_id")

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = endpoint_get(public_id=options["endpoint_id"])
        endpoint_delete(endpoint=endpoint)
        self.stdout.write(f"Deleted {endpoint.public_id} ({redacted_url(endpoint.url)})")

from typing import Any

from django.core.management.base import CommandParser

from mailservice.commands import ServiceCommand
from webhooks.services import endpoint_get, endpoint_rotate_secret


class Command(ServiceCommand):
    help = "Give a webhook endpoint a new signing secret; the old one keeps signing too for 24 hours."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("endpoint_id")

    def handle(self, *args: Any, **options: Any) -> None:
        endpoint = endpoint_get(public_id=options["endpoint_id"])
        secret = endpoint_rotate_secret(endpoint=endpoint)
        self.stdout.write(f"New secret for {endpoint.public_id}; the old one also signs for 24 hours. Shown only now:")
        self.stdout.write(secret)

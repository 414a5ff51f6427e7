from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand
from webhooks.models import EventType
from webhooks.services import endpoint_create
from webhooks.targets import redacted_url


class Command(ServiceCommand):
    help = "Send a domain's events to a URL. The signing secret is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("domain")
        parser.add_argument("url")
        parser.add_argument(
            "--event", action="append", default=[], choices=EventType.values, help="Repeat for several (default: all)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        created = endpoint_create(
            domain=domain_get_by_name(name=options["domain"]), url=options["url"], event_types=options["event"]
        )
        endpoint = created.endpoint
        events = ", ".join(endpoint.event_types) or "all events"
        self.stdout.write(
            f"Created {endpoint.public_id}: {events} of {endpoint.domain.name} to {redacted_url(endpoint.url)}; "
            "the signing secret is shown only now:"
        )
        self.stdout.write(created.secret)

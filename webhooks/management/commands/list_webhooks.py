from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand
from webhooks.selectors import endpoint_list
from webhooks.targets import redacted_url


class Command(ServiceCommand):
    help = "List webhook endpoints (of one domain, or all): id, domain, state, events, URL."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("domain", nargs="?")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_get_by_name(name=options["domain"]) if options["domain"] else None
        for endpoint in endpoint_list(domain=domain):
            state = "enabled" if endpoint.enabled else "DISABLED"
            events = ",".join(endpoint.event_types) or "all"
            self.stdout.write(
                f"{endpoint.public_id}\t{endpoint.domain.name}\t{state}\t{events}\t{redacted_url(endpoint.url)}"
            )

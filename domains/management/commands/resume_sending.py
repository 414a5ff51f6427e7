from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from domains.services import sending_resume
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Resume sending for one domain, or lift the global pause without --domain."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--domain", help="Only this domain")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_get_by_name(name=options["domain"]) if options["domain"] else None
        sending_resume(domain=domain)
        self.stdout.write(f"Sending resumed for {domain.name if domain else 'the service (global switch)'}")

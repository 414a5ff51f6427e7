from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from domains.services import sending_pause
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Pause sending for one domain, or for the whole service without --domain."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--domain", help="Only this domain")
        parser.add_argument("--reason", default="", help="Shown to operators")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_get_by_name(name=options["domain"]) if options["domain"] else None
        sending_pause(domain=domain, actor="manage.py pause_sending", reason=options["reason"])
        self.stdout.write(f"Sending paused for {domain.name if domain else 'all domains'}")

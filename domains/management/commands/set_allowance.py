from typing import Any

from django.core.management.base import CommandError, CommandParser

from domains.selectors import domain_get_by_name
from domains.services import domain_set_allowance
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Set a domain's daily sending allowance: a number of messages per UTC day, or 'unlimited'."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("domain")
        parser.add_argument("allowance", help="N or unlimited")

    def handle(self, *args: Any, **options: Any) -> None:
        value = options["allowance"].strip().lower()
        if value == "unlimited":
            allowance = None
        elif value.isdigit():
            allowance = int(value)
        else:
            raise CommandError(f"allowance must be a whole number or 'unlimited', got {options['allowance']!r}")
        domain = domain_set_allowance(domain=domain_get_by_name(name=options["domain"]), allowance=allowance)
        self.stdout.write(f"{domain.name}: {'unlimited' if allowance is None else allowance} messages per day")

from typing import Any

from django.core.management.base import CommandParser

from domains.dns import Outcome, domain_check_dns
from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Look up a domain's DNS records (as the console's Check DNS does); verify it when its TXT record matches."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_get_by_name(name=options["name"])
        result = domain_check_dns(domain=domain)
        for check in result.checks:
            record = check.record
            line = f"{check.outcome:<20} {record.purpose}: {record.name} {record.type} {record.value}"
            if check.outcome is Outcome.WRONG:
                line += f" (published: {' | '.join(check.seen)})"
            self.stdout.write(line)
        if result.verified_now:
            self.stdout.write(f"{domain.name} is now verified")
        else:
            self.stdout.write(f"{domain.name} is {'verified' if domain.verified else 'not verified'}")

import json
from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand
from messaging.readiness.check import domain_readiness


class Command(ServiceCommand):
    help = (
        "Check a domain against mailbox providers' sender rules (SPF, DKIM, DMARC, alignment, reverse DNS,"
        " DMARC reports, complaint rate) and keep the result for its console page."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--json", action="store_true", help='{"domain", "checks": [{"id", "status", "detail"}]}')

    def handle(self, *args: Any, **options: Any) -> None:
        readiness = domain_readiness(domain=domain_get_by_name(name=options["name"]))
        if options["json"]:
            self.stdout.write(json.dumps(readiness.as_dict(), ensure_ascii=False))
            return
        for check in readiness.checks:
            self.stdout.write(f"{check.status:<5} {check.id:<15} {check.detail}")

from typing import Any

from django.core.management.base import CommandError, CommandParser

from domains.dns import DnsOutcome, domain_check_dns
from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "Look up a domain's DNS records (as the console's Check DNS does) and verify it when its TXT record matches;"
        " exits 2 while the domain is not verified."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_get_by_name(name=options["name"])
        result = domain_check_dns(domain=domain)
        for check in result.checks:
            record = check.record
            line = f"{check.outcome:<20} {record.purpose}: {record.name} {record.type} {record.value}"
            if check.outcome is DnsOutcome.WRONG:
                line += f" (published: {' | '.join(check.seen)})"
            if record.note:
                line += f" ({record.note})"
            self.stdout.write(line)
        if result.dkim_switched_to:
            self.stdout.write(
                f"DKIM: the new key's record was found; signing now uses selector {result.dkim_switched_to}"
            )
        if not domain.verified:
            # Exit status 2, so scripts can wait for DNS with `until manage.py check_domain NAME; do …`.
            raise CommandError(f"{domain.name} is not verified: publish its verification TXT record", returncode=2)
        self.stdout.write(f"{domain.name} is {'now ' if result.verified_now else ''}verified")

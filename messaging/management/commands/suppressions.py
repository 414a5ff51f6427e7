from typing import Any

from django.core.management.base import CommandError, CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand
from messaging.models import SuppressionReason
from messaging.suppressions import suppression_add, suppression_list, suppression_remove


class Command(ServiceCommand):
    help = "List, add or remove the recipient addresses a domain no longer sends to."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["list", "add", "remove"])
        parser.add_argument("domain", help="The sending domain, e.g. example.com")
        parser.add_argument("address", nargs="?", help="The recipient address (add and remove)")

    def handle(self, *args: Any, **options: Any) -> None:
        action, address = options["action"], options["address"]
        if action == "list" and address:
            raise CommandError("list takes no address")
        if action != "list" and not address:
            raise CommandError(f"{action} needs an address: suppressions {action} DOMAIN ADDRESS")
        domain = domain_get_by_name(name=options["domain"])
        if action == "list":
            for entry in suppression_list(domain=domain):
                source = f"\t{entry.source_message}" if entry.source_message else ""
                self.stdout.write(f"{entry.address}\t{entry.reason}\t{entry.created_at:%Y-%m-%d %H:%M:%S}Z{source}")
        elif action == "add":
            entry, created = suppression_add(domain=domain, address=address, reason=SuppressionReason.MANUAL)
            verb = "Suppressed" if created else f"Already suppressed ({entry.reason}):"
            self.stdout.write(f"{verb} {entry.address} for {domain.name}")
        else:
            removed = suppression_remove(domain=domain, address=address)
            self.stdout.write(f"Removed {removed} from the suppressions of {domain.name}")

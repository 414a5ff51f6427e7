from typing import Any

from django.core.management.base import CommandParser

from domains.dns import dkim_record
from domains.selectors import domain_get_by_name
from domains.services import dkim_rotate
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = (
        "Make a new 2048-bit DKIM key for a domain under a new selector and print its DNS record. It is pending:"
        " the domain keeps signing with its current key until check_domain (or the console's Check DNS) finds"
        " the new record."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_get_by_name(name=options["name"])
        key = dkim_rotate(domain=domain)
        record = dkim_record(domain=domain, key=key)
        self.stdout.write(f"New DKIM key for {domain.name}, selector {key.selector} (pending). Publish:")
        self.stdout.write(f"{record.name} {record.type} {record.value}")
        self.stdout.write(f"then run: python manage.py check_domain {domain.name}")

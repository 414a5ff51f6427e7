from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from domains.services import domain_mark_verified
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Mark a domain verified (an operator override of the DNS check)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_mark_verified(domain=domain_get_by_name(name=options["name"]), actor="manage.py verify_domain")
        self.stdout.write(f"{domain.name} verified")

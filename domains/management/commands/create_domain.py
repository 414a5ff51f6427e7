from typing import Any

from django.core.management.base import CommandParser

from domains.services import domain_create
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Create a sending domain (with its DKIM key) and print its id."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("--verified", action="store_true", help="Mark it verified straight away")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = domain_create(name=options["name"], verified=options["verified"], actor="manage.py create_domain")
        self.stdout.write(domain.public_id)

from typing import Any

from django.core.management.base import CommandParser

from apikeys.models import Permission
from apikeys.services import apikey_create
from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Create an API key for a domain. The secret is printed once, alone on the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("domain")
        parser.add_argument(
            "--permission",
            action="append",
            choices=Permission.values,
            required=True,
            help="Repeat for several: email.send, email.read, suppressions.write",
        )
        parser.add_argument("--name", default="")
        parser.add_argument(
            "--test", action="store_true", help="A sandbox key: sends never reach SMTP; simulator.test outcomes"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        created = apikey_create(
            domain=domain_get_by_name(name=options["domain"]),
            permissions=options["permission"],
            name=options["name"],
            is_test=options["test"],
        )
        self.stdout.write(
            f"Created {created.api_key.public_id} for {created.api_key.domain.name} "
            f"({', '.join(created.api_key.permissions)}{', test' if created.api_key.is_test else ''}); "
            "the secret is shown only now:"
        )
        self.stdout.write(created.secret)

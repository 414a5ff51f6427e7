from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand
from templates_app.services import template_version_publish


class Command(ServiceCommand):
    help = "Add a published version to a domain's template (creating the template if new)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("domain")
        parser.add_argument("slug")
        parser.add_argument("--subject", required=True)
        parser.add_argument("--text", default="")
        parser.add_argument("--html", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        version = template_version_publish(
            domain=domain_get_by_name(name=options["domain"]),
            slug=options["slug"],
            subject=options["subject"],
            text=options["text"],
            html=options["html"],
        )
        self.stdout.write(f"{version.template.public_id} {version.number}")

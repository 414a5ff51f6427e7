from typing import Any

from django.core.management.base import CommandParser
from django.utils import timezone

from apikeys.models import ApiKey, Permission
from apikeys.services import apikey_create
from domains.models import Domain
from domains.services import domain_create
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Development: ensure a verified demo domain and print a fresh full-permission key for it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--domain", default="demo.example")

    def handle(self, *args: Any, **options: Any) -> None:
        domain = Domain.objects.filter(name=options["domain"]).first() or domain_create(
            name=options["domain"], verified=True, actor="bootstrap_demo"
        )
        # Only the newest demo key stays usable: the old secrets were printed and are gone.
        ApiKey.objects.filter(domain=domain, name="demo", revoked_at=None).update(revoked_at=timezone.now())
        created = apikey_create(domain=domain, permissions=list(Permission.values), name="demo")
        self.stdout.write(f"Demo domain {domain.name} ({domain.public_id}); send from any address @{domain.name}")
        self.stdout.write(created.secret)

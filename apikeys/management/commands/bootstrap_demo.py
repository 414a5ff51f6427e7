from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser

from apikeys.models import Permission
from apikeys.services import apikey_authenticate, apikey_create
from domains.models import Domain
from domains.services import domain_create
from mailservice.commands import ServiceCommand

DEMO_DOMAIN = "demo.example"


class Command(ServiceCommand):
    help = (
        "Development: ensure a verified demo domain and a full-permission key for it, printed as KEY=<secret>. "
        f"For {DEMO_DOMAIN} (`make run`) the secret is kept in var/demo_key, so the same key works across runs; "
        "the database holds only its hash. Another --domain gets a fresh key each time."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--domain", default=DEMO_DOMAIN)

    def handle(self, *args: Any, **options: Any) -> None:
        domain = Domain.objects.filter(name=options["domain"]).first() or domain_create(
            name=options["domain"], verified=True, actor="bootstrap_demo"
        )
        # Only make run's demo key is kept: a benchmark's key for its own domain must not replace it.
        kept = Path(settings.VAR_DIR) / "demo_key" if domain.name == DEMO_DOMAIN else None
        secret = kept.read_text().strip() if kept and kept.exists() else ""
        api_key = apikey_authenticate(raw_key=secret) if secret else None
        if api_key is None or api_key.domain_id != domain.pk:
            # A fresh database, a revoked demo key or another domain: mint one (and keep its secret).
            secret = apikey_create(domain=domain, permissions=list(Permission.values), name="demo").secret
            if kept:
                kept.parent.mkdir(parents=True, exist_ok=True)
                kept.write_text(secret + "\n")
                kept.chmod(0o600)
        self.stdout.write(f"Demo domain {domain.name} ({domain.public_id}); send from any address @{domain.name}")
        self.stdout.write(f"KEY={secret}")

from typing import Any

from django.core.management.base import CommandError, CommandParser

from apikeys.selectors import apikey_get
from apikeys.services import apikey_revoke
from mailservice.commands import ServiceCommand


class Command(ServiceCommand):
    help = "Revoke an API key, named by its id (key_…) or its prefix."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("key", metavar="KEY_PREFIX_OR_ID")

    def handle(self, *args: Any, **options: Any) -> None:
        api_key = apikey_get(prefix_or_id=options["key"])
        if api_key is None:
            raise CommandError(f"No API key with id or prefix {options['key']!r}")
        apikey_revoke(api_key=api_key)
        self.stdout.write(f"Revoked {api_key.public_id}")

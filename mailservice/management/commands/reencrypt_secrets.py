from typing import Any

from django.core.management.base import CommandError

from mailservice.commands import ServiceCommand
from mailservice.encryption import reencrypt_all_secrets


class Command(ServiceCommand):
    help = (
        "Re-encrypt every stored secret under the first key of MAILSERVICE_ENCRYPTION_KEYS. To rotate: put the new"
        " key first (keep the old one after it), run this, then drop the old key."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        result = reencrypt_all_secrets()
        for label, count in result.rewritten.items():
            self.stdout.write(f"{label}: {count} re-encrypted")
        if result.undecryptable:
            raise CommandError(
                f"{len(result.undecryptable)} secret(s) could not be decrypted with any configured key"
                f" and were left as they are: {', '.join(result.undecryptable[:20])}"
            )

from typing import Any

from django.conf import settings
from django.core.management.base import CommandParser

from mailservice.commands import ServiceCommand
from messaging.retention import messages_purge


class Command(ServiceCommand):
    help = (
        "Delete messages past retention (MAILSERVICE_RETENTION_DAYS, or the domain's own setting) with their "
        "events and raw sources, in small batches; the beat task does the same every "
        "MAILSERVICE_RETENTION_PURGE_INTERVAL seconds."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="only count what would be purged")

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        result = messages_purge(dry_run=dry_run)
        verb = "would be purged" if dry_run else "purged"
        for name, count in result.purged.items():
            self.stdout.write(f"{name}: {count} message(s) {verb}")
        days = settings.MAILSERVICE_RETENTION_DAYS
        self.stdout.write(f"{result.total} message(s) {verb} (default retention {days} days)")

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from mailservice.errors import ApiError


class ServiceCommand(BaseCommand):
    """A management command whose service errors become one-line CLI errors with exit status 1."""

    def execute(self, *args: Any, **options: Any) -> str | None:
        try:
            return super().execute(*args, **options)
        except ApiError as exc:
            raise CommandError(exc.message) from None

import argparse
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


def tcp_port(value: str) -> int:
    """argparse type of a --port option."""
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port (1-65535)")
    return int(value)


def positive_int(value: str) -> int:
    """argparse type of a count such as --days."""
    if not value.isdigit() or not 0 < int(value) <= 36500:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number from 1 to 36500")
    return int(value)

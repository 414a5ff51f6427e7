import asyncio
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mailservice.commands import tcp_port
from messaging.inbound.server import serve


class Command(BaseCommand):
    help = "Run the inbound SMTP server: received mail for verified domains, bounces and complaints."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default 127.0.0.1)")
        parser.add_argument("--port", type=tcp_port, default=2525, help="Port to listen on (default 2525)")

    def handle(self, *args: Any, **options: Any) -> None:
        host, port = options["host"], options["port"]
        limit = settings.MAILSERVICE_INBOUND_MAX_BYTES

        def ready() -> None:
            self.stdout.write(f"Inbound SMTP listening on {host}:{port} (messages up to {limit} bytes)", ending="\n")
            self.stdout.flush()

        try:
            asyncio.run(serve(host=host, port=port, ready=ready))
        except OSError as exc:
            raise CommandError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}") from None

import asyncio
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mailservice.commands import tcp_port
from mailservice.tls import server_tls_context
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
            tls = "STARTTLS offered" if tls_context else "no STARTTLS"
            self.stdout.write(
                f"Inbound SMTP listening on {host}:{port} (messages up to {limit} bytes, {tls})", ending="\n"
            )
            self.stdout.flush()

        try:
            tls_context = server_tls_context()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        try:
            asyncio.run(serve(host=host, port=port, tls_context=tls_context, ready=ready))
        except OSError as exc:
            raise CommandError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}") from None

import asyncio
import ipaddress
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from mailservice.commands import tcp_port
from mailservice.tls import development_tls_context, server_tls_context
from messaging.submission.server import serve


class Command(BaseCommand):
    help = (
        "Run the SMTP submission server: STARTTLS (or --implicit-tls), AUTH with the user name `apikey` and an "
        "API key with email.send as the password, then the rules of POST /v1/send."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default 127.0.0.1)")
        parser.add_argument(
            "--port", type=tcp_port, default=2587, help="Port to listen on (default 2587; 587 in production)"
        )
        parser.add_argument(
            "--implicit-tls", action="store_true", help="TLS from the first byte (port 465) instead of STARTTLS"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        host, port, implicit_tls = options["host"], options["port"], options["implicit_tls"]
        try:
            tls = server_tls_context()
        except ImproperlyConfigured as exc:
            raise CommandError(str(exc)) from None
        plaintext = settings.MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH
        if plaintext and not _is_loopback(host):
            raise CommandError(
                "MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH: plaintext AUTH is only for a server on loopback,"
                f" not {host}"
            )
        certificate = "the configured certificate"
        if tls is None and settings.DEBUG and not plaintext:
            tls = development_tls_context(settings.VAR_DIR / "tls")
            certificate = f"a self-signed development certificate in {settings.VAR_DIR / 'tls'}"
        if tls is None and (implicit_tls or not plaintext):
            raise CommandError(
                "set MAILSERVICE_TLS_CERT_FILE and MAILSERVICE_TLS_KEY_FILE: AUTH is only taken over TLS "
                "(with DEBUG a self-signed development certificate is made; "
                "MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH=true allows AUTH without TLS, on loopback only)"
            )
        tls_mode = "implicit TLS" if implicit_tls else "STARTTLS"
        mode = f"{tls_mode} with {certificate}" if tls else "no TLS, plaintext AUTH"
        limit = settings.MAILSERVICE_SUBMISSION_MAX_BYTES

        def ready() -> None:
            self.stdout.write(f"Submission SMTP listening on {host}:{port} ({mode}; messages up to {limit} bytes)")
            self.stdout.flush()

        try:
            asyncio.run(serve(host=host, port=port, tls=tls, implicit_tls=implicit_tls, ready=ready))
        except OSError as exc:
            raise CommandError(f"Cannot listen on {host}:{port}: {exc.strerror or exc}") from None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False

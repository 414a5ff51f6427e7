import argparse
from datetime import date
from typing import Any

from django.core.management.base import CommandParser

from mailservice.commands import ServiceCommand
from messaging.tls_reports.sending import previous_utc_day, tls_reports_send


def _day(value: str) -> date:
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date (YYYY-MM-DD)") from None


class Command(ServiceCommand):
    help = (
        "Send a UTC day's TLS reports (RFC 8460) to each policy domain's _smtp._tls rua addresses, from "
        "MAILSERVICE_TLSRPT_FROM; what was sent before is not sent again. The beat task sends yesterday's daily."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--date", type=_day, help="the UTC day, YYYY-MM-DD (default: yesterday; today: the day so far)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        day = options["date"] or previous_utc_day()
        results = tls_reports_send(day=day)
        if results is None:
            self.stdout.write("No TLS reports sent: MAILSERVICE_TLSRPT_FROM is unset.")
            return
        for result in results:
            self.stdout.write(str(result))
        self.stdout.write(f"{day}: {len(results)} report submission(s) considered")

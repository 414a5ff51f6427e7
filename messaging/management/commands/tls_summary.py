import json
from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand, positive_int
from messaging.inbound.aggregate.selectors import SUMMARY_DAYS, tls_summary


class Command(ServiceCommand):
    help = "Summarise a domain's SMTP TLS reports: successful and failed sessions, failures by result type."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument(
            "--days", type=positive_int, default=SUMMARY_DAYS, help="reports whose period ended within this many days"
        )
        parser.add_argument(
            "--include-unauthenticated",
            action="store_true",
            help="count every stored report, not only those whose mail was DKIM- or SPF-aligned with the reporter",
        )
        parser.add_argument(
            "--json",
            action="store_true",
            help='{"domain", "reports", "unauthenticated_reports", "successful_sessions", "failed_sessions",'
            ' "failures": [{"result_type", "sessions"}]}',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        summary = tls_summary(
            domain=domain_get_by_name(name=options["name"]),
            days=options["days"],
            include_unauthenticated=options["include_unauthenticated"],
        )
        if options["json"]:
            self.stdout.write(json.dumps(summary.as_dict(), ensure_ascii=False))
            return
        self.stdout.write(
            f"{summary.domain}: {summary.reports} reports, {summary.successful_sessions} successful sessions,"
            f" {summary.failed_sessions} failed; {summary.unauthenticated_reports} unauthenticated reports"
            + (" counted" if options["include_unauthenticated"] else " left out (--include-unauthenticated)")
        )
        for result_type, sessions in summary.failures:
            self.stdout.write(f"  {result_type}: {sessions} sessions")

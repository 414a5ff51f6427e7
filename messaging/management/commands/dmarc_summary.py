import json
from typing import Any

from django.core.management.base import CommandParser

from domains.selectors import domain_get_by_name
from mailservice.commands import ServiceCommand, positive_int
from messaging.inbound.aggregate.selectors import SUMMARY_DAYS, dmarc_summary


class Command(ServiceCommand):
    help = "Summarise a domain's DMARC aggregate reports: messages, DMARC, DKIM and SPF aligned passes, per source."

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
            help='{"domain", "reports", "unauthenticated_reports", "messages", "dmarc_pass", "dkim_aligned_pass",'
            ' "spf_aligned_pass", "sources": [{"source_ip", "messages", "dmarc_pass"}]}',
        )

    def handle(self, *args: Any, **options: Any) -> None:
        summary = dmarc_summary(
            domain=domain_get_by_name(name=options["name"]),
            days=options["days"],
            include_unauthenticated=options["include_unauthenticated"],
        )
        if options["json"]:
            self.stdout.write(json.dumps(summary.as_dict(), ensure_ascii=False))
            return
        self.stdout.write(
            f"{summary.domain}: {summary.reports} reports, {summary.messages} messages, {summary.dmarc_pass} pass DMARC"
            f" ({summary.dkim_aligned_pass} DKIM aligned, {summary.spf_aligned_pass} SPF aligned);"
            f" {summary.unauthenticated_reports} unauthenticated reports"
            + (" counted" if options["include_unauthenticated"] else " left out (--include-unauthenticated)")
        )
        for source in summary.sources:
            name = f" ({source.reverse_name})" if source.reverse_name else ""
            self.stdout.write(f"  {source.source_ip}{name}: {source.messages} messages, {source.dmarc_pass} pass")

"""Report mail in the console: the reports received at the return-path domains, as they arrived."""

from django.contrib import admin
from django.http import HttpRequest

from mailservice.console import (
    ConsoleModelAdmin,
)
from messaging.models import ReportMail

# What a list row shows; bodies and raw source stay in the database until a detail page asks.


@admin.register(ReportMail)
class ReportMailAdmin(ConsoleModelAdmin):
    """Mail received at the DMARC and TLS report addresses, with what became of it: stored as a report, a
    duplicate, or refused with the reason (an unreadable report, a domain the service does not know).
    Read-only: the message itself is never rendered, only its size."""

    list_display = ["created_at", "kind", "outcome", "domain", "envelope_from", "reason_short"]
    list_filter = ["kind", "outcome"]
    list_select_related = ["domain"]
    ordering = ["-created_at"]  # the outcome index serves it with the outcome filter
    show_full_result_count = False
    fields = ["created_at", "kind", "outcome", "reason", "domain", "envelope_from", "subject", "size"]
    readonly_fields = ["created_at", "kind", "outcome", "reason", "domain", "envelope_from", "subject", "size"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: ReportMail | None = None) -> bool:
        return False

    @admin.display(description="Reason")
    def reason_short(self, entry: ReportMail) -> str:
        return entry.reason[:120] or "—"

    @admin.display(description="Size")
    def size(self, entry: ReportMail) -> str:
        return f"{len(entry.raw):,} bytes"

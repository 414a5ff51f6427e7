"""Messages (read-only, fast over millions of rows) and suppressions in the console."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from mailservice.console import EstimatedCountPaginator, sandboxed_html
from mailservice.mailbox import address_of, is_mailbox
from messaging.models import Message, Suppression

# What a list row shows; bodies and raw source stay in the database until a detail page asks.
_LIST_COLUMNS = (
    "public_id",
    "domain__name",
    "direction",
    "status",
    "is_test",
    "from_address",
    "to",
    "subject",
    "created_at",
)


def _mailbox_list(field: str, label: str) -> Callable[[Any, Message], str]:
    """A read-only column for one of the message's mailbox lists."""

    @admin.display(description=label)
    def column(admin_: Any, message: Message) -> str:
        return ", ".join(getattr(message, field)) or "—"

    return column


class MessageChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Message]:
        return super().get_queryset(request, exclude_parameters).only(*_LIST_COLUMNS)


@admin.register(Message)
class MessageAdmin(admin.ModelAdmin):
    list_display = [
        "public_id",
        "created_at",
        "direction",
        "status",
        "is_test",
        "domain",
        "from_address",
        "recipients",
        "subject",
    ]
    list_filter = ["direction", "status", "is_test", "domain", ("created_at", admin.DateFieldListFilter)]
    list_select_related = ["domain"]
    search_fields = ["=public_id", "from_address", "to", "subject"]
    search_help_text = "A msg_… id finds that message; other words search from, to and subject."
    # Newest first by primary key (ids grow with time): a backward scan of the primary key index,
    # where sorting by another column would sort the whole table on every page.
    ordering = ["-id"]
    sortable_by: tuple[str, ...] = ()
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts would scan the whole table
    list_per_page = 50
    fieldsets = [
        (None, {"fields": ["public_id", "domain", "direction", "status", "is_test", "created_at", "updated_at"]}),
        ("Timeline", {"fields": ["timeline"]}),
        (
            "Addresses",
            {"fields": ["from_address", "recipients", "cc_list", "bcc_list", "reply_to_list", "envelope_from"]},
        ),
        ("Content", {"fields": ["subject", "template_used", "text_body", "html_body", "raw_source"]}),
        (
            "Dispatch",
            {"fields": ["message_id_header", "attempts", "next_attempt_at", "last_error"], "classes": ["collapse"]},
        ),
    ]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return MessageChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Message], search_term: str
    ) -> tuple[QuerySet[Message], bool]:
        # A public id is unique and indexed: look it up directly instead of scanning text columns.
        term = search_term.strip()
        if term.startswith("msg_") and " " not in term:
            return queryset.filter(public_id=term), False
        return super().get_search_results(request, queryset, search_term)

    def get_readonly_fields(self, request: HttpRequest, obj: Message | None = None) -> list[str]:
        return [field for fieldset in self.fieldsets for field in fieldset[1]["fields"]]

    recipients = _mailbox_list("to", "To")
    cc_list = _mailbox_list("cc", "Cc")
    bcc_list = _mailbox_list("bcc", "Bcc")
    reply_to_list = _mailbox_list("reply_to", "Reply-To")

    @admin.display(description="Events")
    def timeline(self, message: Message) -> str:
        rows = format_html_join(
            "",
            "<tr><td style='white-space:nowrap'>{}</td><td><strong>{}</strong></td><td>{}</td><td>{}</td></tr>",
            (
                (f"{event.created_at:%Y-%m-%d %H:%M:%S} UTC", event.get_type_display(), event.recipient, event.detail)
                for event in message.events.all()
            ),
        )
        return format_html(
            '<table id="timeline" style="width:100%"><thead><tr><th>When</th><th>Event</th><th>Recipient</th>'
            "<th>Detail</th></tr></thead><tbody>{}</tbody></table>",
            rows or mark_safe("<tr><td colspan=4>No events yet</td></tr>"),  # noqa: S308 - a constant
        )

    @admin.display(description="Template")
    def template_used(self, message: Message) -> str:
        return f"{message.template} v{message.template_version}" if message.template_id else "—"

    @admin.display(description="Text")
    def text_body(self, message: Message) -> str:
        if message.text is None:
            return "—"
        return format_html('<pre id="message-text" style="white-space:pre-wrap;margin:0">{}</pre>', message.text)

    @admin.display(description="HTML (sandboxed)")
    def html_body(self, message: Message) -> str:
        return sandboxed_html(message.html)

    @admin.display(description="Raw source")
    def raw_source(self, message: Message) -> str:
        if message.raw is None:
            return "—"
        source = bytes(message.raw).decode("utf-8", errors="replace")
        return format_html(
            '<pre id="message-raw" style="white-space:pre-wrap;max-height:500px;overflow:auto;margin:0">{}</pre>',
            source,
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Message | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Message | None = None) -> bool:
        return False


class SuppressionForm(forms.ModelForm):
    class Meta:
        model = Suppression
        fields = ["domain", "address", "reason", "detail"]

    def clean_address(self) -> str:
        value = self.cleaned_data["address"].strip()
        if not is_mailbox(value):
            raise forms.ValidationError("Enter one email address, e.g. someone@example.org")
        return address_of(value).lower()


@admin.register(Suppression)
class SuppressionAdmin(admin.ModelAdmin):
    form = SuppressionForm
    list_display = ["address", "domain", "reason", "created_at", "source_message"]
    list_filter = ["domain", "reason"]
    list_select_related = ["domain", "source_message"]
    search_fields = ["address"]
    show_full_result_count = False
    raw_id_fields = ["source_message"]

    def get_fields(self, request: HttpRequest, obj: Suppression | None = None) -> list[str]:
        return (
            ["domain", "address", "reason", "detail"]
            if obj is None
            else ["domain", "address", "reason", "detail", "source_message", "created_at"]
        )

    def get_readonly_fields(self, request: HttpRequest, obj: Suppression | None = None) -> list[str]:
        # A suppression is added or removed, never rewritten into another address.
        return [] if obj is None else ["domain", "address", "reason", "source_message", "created_at"]

"""Messages (read-only, fast over millions of rows) and suppressions in the console."""

from collections.abc import Callable
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from mailservice.console import (
    ConsoleModelAdmin,
    EstimatedCountPaginator,
    console_time,
    remote_images_requested,
    sandboxed_html,
)
from mailservice.errors import ApiError
from messaging.models import Direction, Message, MessageEvent, RefusalReason, Suppression
from messaging.outbound.envelope import envelope_for
from messaging.selectors import (
    recipient_outcomes,
)
from messaging.suppressions import normalize_address

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
        return ", ".join(getattr(message, field) or []) or "—"

    return column


def _event_status(event: MessageEvent) -> str:
    """The timeline's Status cell: the reply code, enhanced status and bounce type, or a complaint's feedback type."""
    bounce = f"({event.bounce_type})" if event.bounce_type else ""
    parts = (str(event.smtp_code or ""), event.enhanced_status, bounce, event.feedback_type)
    return " ".join(part for part in parts if part)


class RefusalReasonFilter(admin.SimpleListFilter):
    """Messages a receiver refused or deferred for one reason (messaging/refusals.py), with the domain filter:
    a domain's messages by reason. Served by event_reason_idx."""

    title = "refusal reason"
    parameter_name = "reason"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(RefusalReason.choices)

    def queryset(self, request: HttpRequest, queryset: QuerySet[Message]) -> QuerySet[Message]:
        if self.value() not in RefusalReason.values:
            return queryset
        refused = MessageEvent.objects.filter(reason=self.value()).values("message_id")
        return queryset.filter(id__in=refused)


class MessageChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Message]:
        return super().get_queryset(request, exclude_parameters).only(*_LIST_COLUMNS)


@admin.register(Message)
class MessageAdmin(ConsoleModelAdmin):
    # Six columns fit 1366 px: the domain is in From, direction and status share one, the subject is cut short.
    list_display = ["public_id", "created", "state", "recipients_short", "subject_short", "from_address"]
    list_filter = [
        "direction",
        "status",
        "is_test",
        "domain",
        RefusalReasonFilter,
        ("created_at", admin.DateFieldListFilter),
    ]
    list_select_related = ["domain"]
    search_fields = ["=public_id", "from_address", "to", "subject"]
    search_help_text = "A msg_… id finds that message; other words search from, to and subject."
    # Newest first by primary key (ids grow with time): a backward scan of the primary key index,
    # where sorting by another column would sort the whole table on every page.
    ordering = ["-id"]
    sortable_by = ()
    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts would scan the whole table
    list_per_page = 50
    fieldsets = [
        (None, {"fields": ["public_id", "domain", "direction", "status", "is_test", "created_at", "updated_at"]}),
        ("Recipients", {"fields": ["recipient_outcomes"]}),
        ("Timeline", {"fields": ["timeline"]}),
        (
            "Addresses",
            {
                "fields": [
                    "from_address",
                    "recipients",
                    "cc_list",
                    "bcc_list",
                    "reply_to_list",
                    "envelope_sender",
                    "envelope_recipients_list",
                ]
            },
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
        return [str(field) for fieldset in self.fieldsets for field in fieldset[1]["fields"]]

    @admin.display(description="Created")
    def created(self, message: Message) -> str:
        return format_html('<span style="white-space:nowrap">{}</span>', console_time(message.created_at))

    @admin.display(description="Direction / status")
    def state(self, message: Message) -> str:
        # A test key's message is marked in the list too: its outcome was simulated, nothing left the machine.
        test = " · test" if message.is_test else ""
        return f"{message.get_direction_display()} · {message.get_status_display()}{test}"

    @admin.display(description="To")
    def recipients_short(self, message: Message) -> str:
        return Truncator(", ".join(message.to) or "—").chars(40)

    @admin.display(description="Subject")
    def subject_short(self, message: Message) -> str:
        return Truncator(message.subject).chars(50)

    recipients = _mailbox_list("to", "To")
    cc_list = _mailbox_list("cc", "Cc")
    bcc_list = _mailbox_list("bcc", "Bcc")
    reply_to_list = _mailbox_list("reply_to", "Reply-To")
    envelope_recipients_list = _mailbox_list("envelope_recipients", "Envelope recipients (SMTP submission)")

    @admin.display(description="Outcome per recipient")
    def recipient_outcomes(self, message: Message) -> str:
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td><strong>{}</strong></td><td>{}</td><td>{}</td></tr>",
            (
                (outcome.address, outcome.label, outcome.enhanced_status, outcome.detail)
                for outcome in recipient_outcomes(message=message)
            ),
        )
        return format_html(
            '<table id="recipient-outcomes" style="width:100%"><thead><tr><th>Recipient</th><th>Outcome</th>'
            "<th>Status</th><th>Detail</th></tr></thead><tbody>{}</tbody></table>",
            rows or mark_safe("<tr><td colspan=4>No recipients</td></tr>"),  # noqa: S308 - a constant
        )

    @admin.display(description="Events")
    def timeline(self, message: Message) -> str:
        rows = format_html_join(
            "",
            "<tr><td style='white-space:nowrap'>{}</td><td><strong>{}</strong></td><td>{}</td><td>{}</td>"
            "<td>{}</td><td>{}</td></tr>",
            (
                (
                    console_time(event.created_at),
                    event.get_type_display(),
                    event.recipient,
                    _event_status(event),
                    event.remote_host,
                    event.detail,
                )
                for event in message.events.all()
            ),
        )
        return format_html(
            '<table id="timeline" style="width:100%"><thead><tr><th>When</th><th>Event</th><th>Recipient</th>'
            "<th>Status</th><th>Relay</th><th>Detail</th></tr></thead><tbody>{}</tbody></table>",
            rows or mark_safe("<tr><td colspan=6>No events yet</td></tr>"),  # noqa: S308 - a constant
        )

    @admin.display(description="Envelope from")
    def envelope_sender(self, message: Message) -> str:
        """Received mail keeps its MAIL FROM; sent mail goes out from each recipient's own VERP return
        path when a return-path domain is set (the first recipient's is shown)."""
        if message.direction == Direction.RECEIVED:
            return message.envelope_from or "—"
        return_path_domain = settings.MAILSERVICE_RETURN_PATH_DOMAIN
        first = 0 if return_path_domain else None
        mail_from = envelope_for(
            message=message, recipients=[], return_path_domain=return_path_domain, recipient_index=first
        ).mail_from
        return f"{mail_from} (VERP return path of the first recipient; each has its own)" if first == 0 else mail_from

    @admin.display(description="Template")
    def template_used(self, message: Message) -> str:
        return f"{message.template} v{message.template_version}" if message.template_id else "—"

    @admin.display(description="Text")
    def text_body(self, message: Message) -> str:
        if message.text is None:
            return "—"
        return format_html('<pre id="message-text" style="white-space:pre-wrap;margin:0">{}</pre>', message.text)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Message | None:
        message = super().get_object(request, object_id, from_field)
        if message is not None:  # read by html_body, which is given only the message
            message.load_remote_images = remote_images_requested(request)
        return message

    @admin.display(description="HTML (sandboxed)")
    def html_body(self, message: Message) -> str:
        return sandboxed_html(message.html, remote_images=getattr(message, "load_remote_images", False))

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
        fields = ["domain", "is_test", "address", "reason", "detail"]

    def clean_address(self) -> str:
        try:
            return normalize_address(self.cleaned_data["address"])
        except ApiError:
            raise forms.ValidationError(
                'Enter one email address, e.g. someone@example.org (comments and unquoted ()<>[]:;\\" are refused)'
            ) from None


@admin.register(Suppression)
class SuppressionAdmin(ConsoleModelAdmin):
    form = SuppressionForm
    list_display = ["address", "domain", "is_test", "reason", "created_at", "expires", "source_message"]
    list_filter = ["domain", "is_test", "reason"]
    list_select_related = ["domain", "source_message"]
    search_fields = ["address"]
    show_full_result_count = False
    raw_id_fields = ["source_message"]

    def get_fields(self, request: HttpRequest, obj: Suppression | None = None) -> list[str]:
        return (
            ["domain", "is_test", "address", "reason", "detail"]
            if obj is None
            else ["domain", "is_test", "address", "reason", "detail", "source_message", "created_at", "expires"]
        )

    @admin.display(description="Expires")
    def expires(self, entry: Suppression) -> str:
        if entry.expires_at is None:
            return "never"
        state = "expired" if entry.expired else "in force until"
        return f"{state} {entry.expires_at:%Y-%m-%d %H:%M} UTC"

    def get_readonly_fields(self, request: HttpRequest, obj: Suppression | None = None) -> list[str]:
        # A suppression is added or removed, never rewritten into another address.
        return (
            [] if obj is None else ["domain", "is_test", "address", "reason", "source_message", "created_at", "expires"]
        )

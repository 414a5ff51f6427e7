"""Messages (read-only, fast over millions of rows), suppressions and source addresses in the console."""

from collections.abc import Callable
from datetime import date, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator

from domains.admin import DomainAdmin, DomainChangeList
from domains.models import Domain, SourceAddress, SourcePool
from mailservice.charts import REPORT_COLORS, line_chart
from mailservice.console import (
    ConsoleModelAdmin,
    EstimatedCountPaginator,
    console_time,
    refuse,
    remote_images_requested,
    sandboxed_html,
)
from mailservice.errors import ApiError
from messaging.models import Direction, Message, MessageEvent, ReportMail, Suppression
from messaging.outbound.direct.sources import (
    configured_addresses,
    counts_today,
    source_address_rows,
    source_of,
    today,
    warmup_cap,
)
from messaging.outbound.domain_holds import held_destinations
from messaging.outbound.fleet_limits import relay_rate_status
from messaging.outbound.mime import envelope_for
from messaging.outbound.overview import destination_overview
from messaging.outbound.transports import delivery_mode
from messaging.readiness.check import domain_readiness
from messaging.readiness.dns_checks import REPORT_MAILBOX, TLS_REPORT_MAILBOX
from messaging.selectors import (
    SUMMARY_DAYS,
    delivery_rates,
    dmarc_daily,
    dmarc_summary,
    recipient_outcomes,
    tls_summary,
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


class MessageChangeList(ChangeList):
    def get_queryset(self, request: HttpRequest, exclude_parameters: Any = None) -> QuerySet[Message]:
        return super().get_queryset(request, exclude_parameters).only(*_LIST_COLUMNS)


@admin.register(Message)
class MessageAdmin(ConsoleModelAdmin):
    # Six columns fit 1366 px: the domain is in From, direction and status share one, the subject is cut short.
    list_display = ["public_id", "created", "state", "recipients_short", "subject_short", "from_address"]
    list_filter = ["direction", "status", "is_test", "domain", ("created_at", admin.DateFieldListFilter)]
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
        return f"{message.get_direction_display()} · {message.get_status_display()}"

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

    @admin.display(description="ReportedOutcome per recipient")
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
            '<table id="recipient-outcomes" style="width:100%"><thead><tr><th>Recipient</th><th>ReportedOutcome</th>'
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
        fields = ["domain", "address", "reason", "detail"]

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
    list_display = ["address", "domain", "reason", "created_at", "expires", "source_message"]
    list_filter = ["domain", "reason"]
    list_select_related = ["domain", "source_message"]
    search_fields = ["address"]
    show_full_result_count = False
    raw_id_fields = ["source_message"]

    def get_fields(self, request: HttpRequest, obj: Suppression | None = None) -> list[str]:
        return (
            ["domain", "address", "reason", "detail"]
            if obj is None
            else ["domain", "address", "reason", "detail", "source_message", "created_at", "expires"]
        )

    @admin.display(description="Expires")
    def expires(self, entry: Suppression) -> str:
        if entry.expires_at is None:
            return "never"
        state = "expired" if entry.expired else "in force until"
        return f"{state} {entry.expires_at:%Y-%m-%d %H:%M} UTC"

    def get_readonly_fields(self, request: HttpRequest, obj: Suppression | None = None) -> list[str]:
        # A suppression is added or removed, never rewritten into another address.
        return [] if obj is None else ["domain", "address", "reason", "source_message", "created_at", "expires"]


# --- the domain pages, with the mail's side of them ----------------------------------------------
# domains/admin.py sits below messaging and cannot read it, so the console's domain pages are
# registered again here with what only messaging knows: the rates, the relay and the message guard.


def _percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.1%}"


def _rate(value: float | None) -> str:
    return "unlimited" if value is None else f"{value:.1f} messages/s"


def _relay_text(status: dict, held: dict[str, dict]) -> str:
    """The relay's rate in force and why, and the recipient domains held, in one line for the list's banner."""
    text = f"Relay rate: {_rate(status['effective'])}"
    if status["effective"] != status["configured"]:
        text += f" (configured {_rate(status['configured'])}; lowered because {status['reason']})"
    elif status["reason"]:
        text += f" ({status['reason']}, {status['changed_at']:%H:%M:%S} UTC)"
    if status["connections"]:
        text += f". Connections: at most {status['connections']}"
    if held:
        waiting = ", ".join(f"{name} until {hold['until']:%H:%M:%S} UTC" for name, hold in held.items())
        text += f". Held destinations: {waiting}"
    return text + "."


def _destination_row(status: dict) -> dict:
    """A row of the Destinations page from a destination's status (shaping.destination_status)."""
    rate = _rate(status["effective"])
    if status["effective"] != status["configured"]:
        rate += f", lowered because {status['reason']}"
    elif status["reason"]:
        rate += f" ({status['reason']}, {status['changed_at']:%H:%M:%S} UTC)"
    cap = status["connections"] or "no cap"
    in_use = "—" if status["connections_open"] is None else status["connections_open"]
    error_at = status.get("last_error_at")
    return {
        "name": status["name"],
        "mx_hosts": ", ".join(status["mx_hosts"]) or "—",
        "tls_policy": status.get("tls_policy") or "—",
        "connections": f"{in_use} / {cap}",
        "rate": rate,
        "last_error": status["last_error"] or "—",
        "last_error_at": f"{error_at:%Y-%m-%d %H:%M:%S} UTC" if error_at else "",
    }


class DomainWithRatesChangeList(DomainChangeList):
    """Adds each listed domain's bounce and complaint rates, one aggregate query for the page."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rates = delivery_rates(
            domain_ids=[domain.pk for domain in self.result_list], days=settings.MAILSERVICE_RATE_WINDOW_DAYS
        )
        for domain in self.result_list:
            domain.delivery_rates = rates[domain.pk]


def _reports_context(domain: Domain) -> dict[str, Any]:
    """The domain page's DMARC and TLS reports: the `rua` to publish, the last 30 days' volume and
    pass rate per day, and the sources that fail DMARC with their reverse names."""
    return_path = settings.MAILSERVICE_RETURN_PATH_DOMAIN
    by_day = {day: (messages, passed) for day, messages, passed in dmarc_daily(domain=domain)}
    last = timezone.now().date()
    days = [last - timedelta(days=back) for back in range(SUMMARY_DAYS - 1, -1, -1)]
    labels = [f"{day:%m-%d}" for day in days]
    volume = {
        "messages": [by_day.get(day, (0, 0))[0] for day in days],
        "dmarc pass": [by_day.get(day, (0, 0))[1] for day in days],
    }
    rate = {"pass rate %": [round(100 * p / m) if m else 0 for m, p in zip(*volume.values(), strict=True)]}
    summary = dmarc_summary(domain=domain)
    return {
        "report_rua": {
            "dmarc": f"mailto:{REPORT_MAILBOX}@{return_path}" if return_path else "",
            "tls": f"mailto:{TLS_REPORT_MAILBOX}@{return_path}" if return_path else "",
        },
        "dmarc_summary": summary,
        "dmarc_failing": [source for source in summary.sources if source.dmarc_fail],
        "dmarc_volume_chart": line_chart(
            title="DMARC-reported messages per day", labels=labels, series=volume, colors=REPORT_COLORS
        ),
        "dmarc_rate_chart": line_chart(
            title="DMARC pass rate per day (%)", labels=labels, series=rate, colors=REPORT_COLORS
        ),
        "tls_summary": tls_summary(domain=domain),
    }


class DomainMailAdmin(DomainAdmin):
    list_display = [*DomainAdmin.list_display, "bounce_rate", "complaint_rate"]
    change_form_template = "admin/messaging/domain_change_form.html"

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DomainWithRatesChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        relay = {
            "relay_text": f"Delivery: {delivery_mode()}. {_relay_text(relay_rate_status(), held_destinations())}",
            "destinations_url": "destinations/",
        }
        return super().changelist_view(request, {**relay, **(extra_context or {})})

    def destinations_view(self, request: HttpRequest) -> HttpResponse:
        """Where mail goes (the relay, or each destination of direct delivery) and the limits it goes within."""
        if not self.has_view_permission(request):
            return refuse(request, "You may not view the delivery destinations.")
        overview = destination_overview()
        rows = [_destination_row(status) for status in overview.destinations]
        if not overview.direct:
            rows = [_destination_row({**overview.relay, "name": "the relay", "mx_hosts": [], "last_error": ""})]
        context = {
            **self.admin_site.each_context(request),
            "title": "Destinations",
            "overview": overview,
            "rows": rows,
            "sources": _source_rows() if overview.direct else [],
        }
        return TemplateResponse(request, "admin/messaging/destinations.html", context)

    @admin.display(description=f"Bounces ({settings.MAILSERVICE_RATE_WINDOW_DAYS} d)")
    def bounce_rate(self, domain: Domain) -> str:
        return _percent(domain.delivery_rates.bounce_rate)  # type: ignore[attr-defined]  # set by the change list

    @admin.display(description=f"Complaints ({settings.MAILSERVICE_RATE_WINDOW_DAYS} d)")
    def complaint_rate(self, domain: Domain) -> str:
        return _percent(domain.delivery_rates.complaint_rate)  # type: ignore[attr-defined]  # set by the change list

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        url = reverse("admin:domains_domain_check_readiness", args=[object_id]) if object_id.isdigit() else ""
        domain = Domain.objects.filter(pk=object_id).first() if object_id.isdigit() else None
        reports = _reports_context(domain) if domain is not None and self.has_view_permission(request, domain) else {}
        context = {"check_readiness_url": url, **reports, **(extra_context or {})}
        return super().change_view(request, object_id, form_url, context)

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        check = path(
            "<int:object_id>/check-readiness/", view(self.check_readiness_view), name="domains_domain_check_readiness"
        )
        destinations = path("destinations/", view(self.destinations_view), name="messaging_destinations")
        return [check, destinations, *super().get_urls()]

    def check_readiness_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Run the readiness check now (it asks DNS) and show the domain's page with the result."""
        if request.method != "POST" or not self.has_change_permission(request):
            return refuse(request, "Checking readiness needs a POST from an operator who may change domains.")
        domain = get_object_or_404(Domain, pk=object_id)
        try:
            readiness = domain_readiness(domain=domain)
        except ApiError as exc:
            self.message_user(request, exc.message, messages.ERROR)
        else:
            failed = ", ".join(check.id for check in readiness.checks if check.status == "fail")
            text, level = (f"failing: {failed}", messages.WARNING) if failed else ("no check fails", messages.SUCCESS)
            self.message_user(request, f"Readiness of {domain.name} checked: {text}.", level)
        return HttpResponseRedirect(reverse("admin:domains_domain_change", args=[domain.pk]))

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: dict | None = None) -> HttpResponse:
        domain = self.get_object(request, object_id)
        if domain is not None and Message.objects.filter(domain=domain).exists():
            return refuse(
                request,
                f"{domain.name} has sent or received messages. They are the record of its mail, so the domain "
                "cannot be deleted while they exist, by any account. Pause its sending to stop it instead.",
            )
        return super().delete_view(request, object_id, extra_context)


admin.site.unregister(Domain)
admin.site.register(Domain, DomainMailAdmin)


def _warmup_text(row: SourceAddress, day: date) -> str:
    cap = warmup_cap(row, day)
    if cap is None:
        return "warm"
    if row.warmup_started is None:
        return f"starts at its first send ({cap} per destination on day 1)"
    return f"day {max(0, (day - row.warmup_started).days) + 1}: {cap} per destination"


def _source_rows() -> list[dict]:
    """The Destinations page's table of source addresses: pools, HELO, warm-up day and today's count."""
    rows = source_address_rows(configured_addresses())
    counts = counts_today(row.address for row in rows)
    pools = list(SourcePool.objects.all())
    day = today()
    return [
        {
            "address": row.address,
            "pools": ", ".join(pool.name for pool in pools if row.address in pool.addresses) or "all (no pool)",
            "helo": source_of(row).helo,
            "warmup": _warmup_text(row, day),
            "today": counts[row.address],
        }
        for row in rows
    ]


class SourceAddressChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Today's counts in one Redis round trip and the pools in one query, for the whole page.
        counts = counts_today(row.address for row in self.result_list)
        pools = list(SourcePool.objects.all())
        for row in self.result_list:
            row.count_today = counts[row.address]
            row.pool_names = [pool.name for pool in pools if row.address in pool.addresses]


@admin.register(SourceAddress)
class SourceAddressAdmin(ConsoleModelAdmin):
    """Direct delivery's source addresses (MAILSERVICE_SOURCE_ADDRESSES): pools, EHLO name, warm-up, today's count.
    An operator marks an address warm, or moves the day its warm-up began."""

    list_display = ["address", "pools", "helo", "warmup", "today"]
    fields = ["address", "helo", "warm", "warmup_started", "warmup"]
    readonly_fields = ["address", "helo", "warmup"]

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return SourceAddressChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        source_address_rows(configured_addresses())  # every configured address has its row, used or not
        return super().changelist_view(request, extra_context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the addresses come from MAILSERVICE_SOURCE_ADDRESSES

    @admin.display(description="Pools")
    def pools(self, row: SourceAddress) -> str:
        return ", ".join(row.pool_names) or "—"  # type: ignore[attr-defined]  # set by the change list

    @admin.display(description="HELO")
    def helo(self, row: SourceAddress) -> str:
        if row.address not in configured_addresses():
            return "not in MAILSERVICE_SOURCE_ADDRESSES: unused"
        return source_of(row).helo

    @admin.display(description="Warm-up")
    def warmup(self, row: SourceAddress) -> str:
        return _warmup_text(row, today())

    @admin.display(description="Sent today")
    def today(self, row: SourceAddress) -> int:
        return row.count_today  # type: ignore[attr-defined]  # set by the change list


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

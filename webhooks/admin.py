"""Webhook endpoints in the console: created through the service (the secret shown once), their
state (a disabled endpoint says why), recent deliveries, the deliveries that gave up with a Replay button
each, and re-sending one event or all failed ones."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from mailservice.console import ConsoleModelAdmin, adopt, console_time, refuse
from mailservice.errors import ValidationFailed
from webhooks.models import EventType, WebhookDelivery, WebhookEndpoint
from webhooks.replay import deliveries_resend
from webhooks.selectors import endpoint_failed_deliveries
from webhooks.services import endpoint_create, endpoint_enable, endpoint_rotate_secret
from webhooks.targets import url_check

RECENT_DELIVERIES = 50
FAILED_DELIVERIES = 50


class WebhookEndpointAddForm(forms.ModelForm):
    url = forms.URLField(max_length=2000, assume_scheme="https", help_text="http(s) only; private targets are refused")
    event_types = forms.MultipleChoiceField(
        choices=EventType.choices,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="None selected: every event type",
    )

    class Meta:
        model = WebhookEndpoint
        fields = ["domain", "url"]

    def clean_url(self) -> str:
        url = self.cleaned_data["url"]
        try:
            url_check(url)
        except ValidationFailed as exc:
            raise forms.ValidationError(exc.message) from None
        return url


def _secret_page(request: HttpRequest, endpoint: WebhookEndpoint, secret: str, *, rotated: bool) -> HttpResponse:
    """The one page that ever shows a secret: rendered in reply to the POST, never stored in a message."""
    context = {
        **admin.site.each_context(request),
        "title": "Signing secret",
        "endpoint": endpoint,
        "secret": secret,
        "rotated": rotated,
    }
    response = TemplateResponse(request, "admin/webhooks/webhookendpoint/secret.html", context)
    response["Cache-Control"] = "no-store"
    return response


@admin.register(WebhookEndpoint)
class WebhookEndpointAdmin(ConsoleModelAdmin):
    list_display = ["public_id", "domain", "url", "events", "state", "failing_since", "created_at"]
    list_filter = ["enabled", "domain"]
    list_select_related = ["domain"]
    search_fields = ["public_id", "url", "domain__name"]
    actions = ["rotate_secret", "enable"]
    change_fields = [
        "public_id",
        "domain",
        "url",
        "events",
        "state",
        "failing_since",
        "previous_secret_expires_at",
        "failed_deliveries",
        "recent_deliveries",
    ]

    @admin.display(description="Events")
    def events(self, endpoint: WebhookEndpoint) -> str:
        return ", ".join(endpoint.event_types) or "all"

    @admin.display(description="State", ordering="enabled")
    def state(self, endpoint: WebhookEndpoint) -> str:
        return "enabled" if endpoint.enabled else f"DISABLED: {endpoint.disabled_reason or 'by an operator'}"

    @admin.display(description=f"Recent deliveries (newest {RECENT_DELIVERIES})")
    def recent_deliveries(self, endpoint: WebhookEndpoint) -> SafeString | str:
        deliveries = endpoint.deliveries.order_by("-created_at", "-id")[:RECENT_DELIVERIES]
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    console_time(d.created_at),
                    d.event_type,
                    d.event_id,
                    d.status,
                    d.last_status_code or "—",
                    f"{d.last_latency_ms} ms" if d.last_latency_ms is not None else "—",
                    d.attempts,
                    d.last_error or "",
                )
                for d in deliveries
            ),
        )
        if not rows:
            return "none yet"
        header = "".join(
            f"<th>{name}</th>" for name in ("Created", "Event", "Id", "Status", "Code", "Latency", "Attempts", "Error")
        )
        return format_html("<table><tr>{}</tr>{}</table>", SafeString(header), rows)

    @admin.display(description=f"Failed deliveries (gave up; newest {FAILED_DELIVERIES})")
    def failed_deliveries(self, endpoint: WebhookEndpoint) -> SafeString | str:
        # The change page is one <form> with the CSRF token: each button posts it to its own replay URL.
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td><code>{}</code></td><td>{}</td><td>{}</td>"
            '<td><button type="submit" formaction="{}" formmethod="post" name="replay">Replay</button></td></tr>',
            (
                (
                    console_time(d.created_at),
                    d.event_type,
                    d.event_id,
                    d.attempts,
                    d.last_error or "",
                    reverse("admin:webhooks_webhookendpoint_replay", args=[endpoint.pk, d.pk]),
                )
                for d in endpoint_failed_deliveries(endpoint=endpoint, limit=FAILED_DELIVERIES)
            ),
        )
        if not rows:
            return "none"
        header = "".join(f"<th>{name}</th>" for name in ("Created", "Event", "Id", "Attempts", "Last error", ""))
        return format_html("<table><tr>{}</tr>{}</table>", SafeString(header), rows)

    def get_urls(self) -> list[URLPattern]:
        replay = self.admin_site.admin_view(self.replay_view)
        own = [path("<int:pk>/replay/<int:delivery>/", replay, name="webhooks_webhookendpoint_replay")]
        return own + super().get_urls()

    def replay_view(self, request: HttpRequest, pk: int, delivery: int) -> HttpResponse:
        """A failed delivery's Replay button: sent again from the first attempt, with its webhook-id."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        endpoint = get_object_or_404(WebhookEndpoint, pk=pk)
        if not self.has_change_permission(request, endpoint):
            return refuse(request, "Your account cannot replay webhook deliveries.")
        one = endpoint.deliveries.filter(pk=delivery)
        found = one.values_list("event_id", flat=True).first()
        if found is None:
            self.message_user(request, "No such delivery of this endpoint.", messages.ERROR)
        elif deliveries_resend(deliveries=one):
            self.log_change(request, endpoint, f"Replayed {found}")
            self.message_user(request, f"{found} is queued again; the webhooks worker sends it.", messages.SUCCESS)
        else:
            self.message_user(request, f"{found} is being sent right now.", messages.WARNING)
        return HttpResponseRedirect(reverse("admin:webhooks_webhookendpoint_change", args=[endpoint.pk]))

    def get_fields(self, request: HttpRequest, obj: WebhookEndpoint | None = None) -> list[str]:
        return ["domain", "url", "event_types"] if obj is None else self.change_fields

    def get_readonly_fields(self, request: HttpRequest, obj: WebhookEndpoint | None = None) -> list[str]:
        # The URL is fixed: a different target is a new endpoint with a new secret.
        return [] if obj is None else self.change_fields

    def get_form(
        self, request: HttpRequest, obj: WebhookEndpoint | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = WebhookEndpointAddForm
            kwargs["fields"] = ["domain", "url"]
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: WebhookEndpoint, form: forms.ModelForm, change: bool) -> None:
        created = endpoint_create(
            domain=form.cleaned_data["domain"],
            url=form.cleaned_data["url"],
            event_types=form.cleaned_data["event_types"],
        )
        adopt(obj, created.endpoint)
        obj.secret = created.secret  # type: ignore[attr-defined]  # for response_add only; never saved

    def response_add(
        self, request: HttpRequest, obj: WebhookEndpoint, post_url_continue: str | None = None
    ) -> HttpResponse:
        return _secret_page(request, obj, obj.secret, rotated=False)  # type: ignore[attr-defined]  # set in save_model

    @admin.action(description="Rotate the signing secret (one endpoint)", permissions=["change"])
    def rotate_secret(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> HttpResponse | None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one endpoint: its new secret is shown once.", messages.ERROR)
            return None
        endpoint = queryset.select_related("domain").get()
        secret = endpoint_rotate_secret(endpoint=endpoint)
        self.log_change(request, endpoint, "Rotated the signing secret")
        return _secret_page(request, endpoint, secret, rotated=True)

    @admin.action(description="Enable selected endpoints again", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet[WebhookEndpoint]) -> None:
        for endpoint in queryset.filter(enabled=False):
            endpoint_enable(endpoint=endpoint)
            self.log_change(request, endpoint, "Enabled")
        self.message_user(request, "Enabled; deliveries still pending go out again.", messages.SUCCESS)


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ConsoleModelAdmin):
    # What an operator scans for first (has it failed, how often, with which code), then what it was; the
    # event id (searchable) and the latency are on the delivery's page, so the list fits 1280 pixels.
    list_display = ["created_at", "status", "attempts", "last_status_code", "event_type", "endpoint", "next_attempt_at"]
    list_filter = ["status", "event_type", "endpoint"]
    list_select_related = ["endpoint__domain"]
    date_hierarchy = "created_at"
    search_fields = ["event_id"]
    show_full_result_count = False
    actions = ["resend"]
    readonly_fields = [field.name for field in WebhookDelivery._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Re-send selected deliveries (e.g. every failed one of a day: filter, select all)")
    def resend(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = deliveries_resend(deliveries=queryset)
        self.message_user(request, f"{count} deliveries queued again from the first attempt.", messages.SUCCESS)

"""Domains in the console: state and usage at a glance, DNS records to publish, the sending switches.

DomainAdmin is the page's domains side, and is not registered here: what the page shows of the mail
itself (bounce and complaint rates, the relay's rate, held destinations, the refusal to delete a domain
with messages) is added by messaging/admin/domains.py, which registers its subclass of DomainAdmin as
the one domain page: domains sits below messaging and never imports it."""

from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.utils.safestring import mark_safe

from domains.dns import Purpose, dns_records, domain_check_dns, unconfigured_settings
from domains.models import DkimKey, DkimKeyState, Domain, SourcePool
from domains.selectors import dkim_signing_selector, readiness_last, with_sends_today
from domains.sending import PauseKind, domain_pause, global_pause, global_paused, switch_pause
from domains.services import (
    dkim_activate,
    domain_create,
    domain_mark_verified,
    domain_set_allowance,
    domain_set_dispatch_weight,
    domain_set_retention,
    domain_set_source_pool,
    normalize_domain_name,
    sending_pause,
    sending_resume,
    source_pool_save,
)
from mailservice.console import ConsoleModelAdmin, adopt, console_time, refuse
from mailservice.errors import ApiError

# Custom permissions (created by mailservice/migrations/0001_support_group.py).
PAUSE_PERMISSION = "domains.pause_sending"
RESUME_PERMISSION = "domains.resume_sending"


class DomainAddForm(forms.ModelForm):
    class Meta:
        model = Domain
        fields = ["name"]

    def clean_name(self) -> str:
        try:
            return normalize_domain_name(self.cleaned_data["name"])
        except ApiError as exc:
            raise forms.ValidationError(exc.message) from None


class PauseForm(forms.Form):
    reason = forms.CharField(max_length=500, widget=forms.Textarea(attrs={"rows": 3, "cols": 60}))


class DomainChangeList(ChangeList):
    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Every row says when the global switch holds its mail, whatever its own switch says.
        # changelist_view has read the switch for its banner already: one query for both.
        globally_paused = getattr(request, "global_paused", None)
        if globally_paused is None:
            globally_paused = global_paused()
        for domain in self.result_list:
            domain.globally_paused = globally_paused


class DomainAdmin(ConsoleModelAdmin):
    list_display = ["name", "verification", "sending", "usage"]
    list_display_links = ["name"]
    list_filter = ["verified", "sending_paused", "auto_paused"]
    search_fields = ["name"]
    show_full_result_count = False
    actions = ["check_dns", "mark_verified"]
    change_readonly = [
        "name",
        "public_id",
        "verification",
        "sending",
        "usage",
        "dkim_signing",
        "created_at",
    ]

    # --- list -------------------------------------------------------------------------------
    def get_queryset(self, request: HttpRequest) -> QuerySet[Domain]:
        return with_sends_today(super().get_queryset(request))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return DomainChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict | None = None) -> HttpResponse:
        pause = global_pause()
        request.global_paused = pause is not None  # type: ignore[attr-defined]  # read by DomainChangeList
        context = {
            "global_paused": pause is not None,
            "global_pause_text": pause.describe() if pause else "",
            **(extra_context or {}),
        }
        return super().changelist_view(request, context)

    @admin.display(description="Verified", ordering="verified")
    def verification(self, domain: Domain) -> str:
        if not domain.verified:
            return mark_safe('<span style="color:var(--error-fg);white-space:nowrap">✗ not verified</span>')  # noqa: S308
        when = console_time(domain.verified_at) if domain.verified_at else "unknown time"
        return format_html(
            '<span style="white-space:nowrap">✓ verified</span><br><small>{}, {}</small>',
            domain.verified_by or "unknown",
            when,
        )

    @admin.display(description="Sending")
    def sending(self, domain: Domain) -> str:
        pause = domain_pause(domain)
        if pause is not None:
            label = "AUTO-PAUSED" if pause.kind == PauseKind.SAFEGUARD else "PAUSED"
            return format_html(
                '<strong style="color:var(--error-fg)">{}</strong> <a class="button" href="{}">Resume</a>'
                "<br><small>{}</small>",
                label,
                reverse("admin:domains_domain_resume", args=[domain.pk]),
                pause.describe(),
            )
        pause_url = reverse("admin:domains_domain_pause", args=[domain.pk])
        if getattr(domain, "globally_paused", False):
            return format_html(
                '<span style="white-space:nowrap"><strong style="color:var(--error-fg)">■ held</strong> '
                '<a class="button" href="{}">Pause</a></span><br><small>all sending is paused</small>',
                pause_url,
            )
        return format_html(
            '<span style="white-space:nowrap"><span style="color:green">● on</span> '
            '<a class="button" href="{}">Pause</a></span>',
            pause_url,
        )

    @admin.display(description="Sent today / allowance")
    def usage(self, domain: Domain) -> str:
        allowance = "unlimited" if domain.daily_allowance is None else str(domain.daily_allowance)
        return f"{domain.sends_today} / {allowance}"  # type: ignore[attr-defined]  # annotated by get_queryset

    @admin.display(description="DKIM signing with")
    def dkim_signing(self, domain: Domain) -> str:
        selector = dkim_signing_selector(domain=domain)
        return f"selector {selector}" if selector else "no active key"

    # --- add and change ---------------------------------------------------------------------
    def get_fields(self, request: HttpRequest, obj: Domain | None = None) -> list[str]:
        editable = ["daily_allowance", "retention_days", "dispatch_weight", "source_pool"]
        return ["name"] if obj is None else [*self.change_readonly[:5], *editable, *self.change_readonly[5:]]

    def get_readonly_fields(self, request: HttpRequest, obj: Domain | None = None) -> list[str]:
        return [] if obj is None else self.change_readonly

    def get_form(self, request: HttpRequest, obj: Domain | None = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = DomainAddForm
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: Domain, form: forms.ModelForm, change: bool) -> None:
        if change:
            domain_set_allowance(domain=obj, allowance=form.cleaned_data["daily_allowance"])
            domain_set_retention(domain=obj, days=form.cleaned_data["retention_days"])
            domain_set_dispatch_weight(domain=obj, weight=form.cleaned_data["dispatch_weight"])
            domain_set_source_pool(domain=obj, pool=form.cleaned_data["source_pool"])
            return
        adopt(obj, domain_create(name=form.cleaned_data["name"]))

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        domain = self.get_object(request, object_id)
        records = dns_records(domain=domain) if domain else []
        readiness = readiness_last(domain=domain) if domain else None
        context = {
            "dns_records": records,
            "dkim_pending": any(record.purpose is Purpose.DKIM_PENDING for record in records),
            "unconfigured_settings": unconfigured_settings(),
            "readiness": readiness,
            "readiness_checked_at": console_time(readiness.checked_at) if readiness else "",
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # Domains are deleted one at a time, on a page that says why one with mail cannot be.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    # --- operator actions ---------------------------------------------------------------------
    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path("sending/pause/", view(self.pause_view), name="domains_sending_pause"),
            path("sending/resume/", view(self.resume_view), name="domains_sending_resume"),
            path("<int:object_id>/pause/", view(self.pause_view), name="domains_domain_pause"),
            path("<int:object_id>/resume/", view(self.resume_view), name="domains_domain_resume"),
            path("<int:object_id>/check-dns/", view(self.check_dns_view), name="domains_domain_check_dns"),
            path("<int:object_id>/mark-verified/", view(self.mark_verified_view), name="domains_domain_mark_verified"),
            path("<int:object_id>/dkim-force/", view(self.dkim_force_view), name="domains_domain_dkim_force"),
            *super().get_urls(),
        ]

    def pause_view(self, request: HttpRequest, object_id: int | None = None) -> HttpResponse:
        """Pause one domain (object_id) or all sending; GET asks for a reason, POST pauses."""
        if not request.user.has_perm(PAUSE_PERMISSION):
            return refuse(request, "You may not pause sending.")
        domain = get_object_or_404(Domain, pk=object_id) if object_id is not None else None
        form = PauseForm(request.POST if request.method == "POST" else None)
        if not form.is_valid():
            return self._switch_page(request, domain, form, pause=True)
        sending_pause(domain=domain, actor=request.user.get_username(), reason=form.cleaned_data["reason"])
        return self._switched(request, domain, "paused")

    def resume_view(self, request: HttpRequest, object_id: int | None = None) -> HttpResponse:
        """Lift the pause of one domain (object_id) or of all sending; GET asks to confirm, POST resumes."""
        if not request.user.has_perm(RESUME_PERMISSION):
            return refuse(request, "You may not lift a pause on sending.")
        domain = get_object_or_404(Domain, pk=object_id) if object_id is not None else None
        if request.method != "POST":
            return self._switch_page(request, domain, forms.Form(), pause=False)
        sending_resume(domain=domain)
        return self._switched(request, domain, "resumed")

    def _switched(self, request: HttpRequest, domain: Domain | None, done: str) -> HttpResponse:
        if domain is not None:
            self.log_change(request, domain, f"{done.capitalize()} sending")
        self.message_user(request, f"Sending {done} for {domain.name if domain else 'all domains'}.", messages.SUCCESS)
        if domain is not None:
            return HttpResponseRedirect(reverse("admin:domains_domain_change", args=[domain.pk]))
        return HttpResponseRedirect(reverse("admin:domains_domain_changelist"))

    def _switch_page(
        self, request: HttpRequest, domain: Domain | None, form: forms.Form, *, pause: bool
    ) -> HttpResponse:
        current = switch_pause(domain=domain)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": f"{'Pause' if pause else 'Resume'} sending: {domain.name if domain else 'all domains'}",
            "domain": domain,
            "pause": pause,
            "paused": current is not None,
            "pause_text": current.describe() if current else "",
            "form": form,
        }
        return TemplateResponse(request, "admin/domains/domain/sending_switch.html", context)

    def _render_dns_checks(self, request: HttpRequest, domains: list[Domain]) -> HttpResponse:
        try:
            results = [(domain, domain_check_dns(domain=domain)) for domain in domains]
        except ApiError as exc:
            self.message_user(request, exc.message, messages.ERROR)
            return HttpResponseRedirect(reverse("admin:domains_domain_changelist"))
        for domain, result in results:
            if result.verified_now:
                self.log_change(request, domain, "Verified by DNS check")
            if result.dkim_switched_to:
                self.log_change(request, domain, f"DKIM signing switched to {result.dkim_switched_to} (record found)")
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "DNS check", "results": results}
        return TemplateResponse(request, "admin/domains/domain/dns_check.html", context)

    def check_dns_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if request.method != "POST" or not self.has_change_permission(request):
            return refuse(request, "Checking DNS needs a POST from an operator who may change domains.")
        return self._render_dns_checks(request, [get_object_or_404(Domain, pk=object_id)])

    def mark_verified_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if request.method != "POST" or not self.has_change_permission(request):
            return refuse(request, "Marking a domain verified needs a POST from an operator who may change domains.")
        domain = get_object_or_404(Domain, pk=object_id)
        self._mark_verified(request, domain)
        return HttpResponseRedirect(reverse("admin:domains_domain_change", args=[domain.pk]))

    def dkim_force_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        """Sign with the pending DKIM key before its record was found: the operator's override, recorded."""
        if request.method != "POST" or not self.has_change_permission(request):
            return refuse(request, "Forcing a DKIM key needs a POST from an operator who may change domains.")
        domain = get_object_or_404(Domain, pk=object_id)
        pending = get_object_or_404(DkimKey, domain=domain, state=DkimKeyState.PENDING)
        key = dkim_activate(key=pending, found_in_dns=False, actor=request.user.get_username())
        self.log_change(request, domain, f"DKIM signing switched to {key.selector} (forced, record not checked)")
        self.message_user(
            request,
            f"{domain.name} now signs with selector {key.selector} (forced by {key.forced_by}).",
            messages.WARNING,
        )
        return HttpResponseRedirect(reverse("admin:domains_domain_change", args=[domain.pk]))

    def _mark_verified(self, request: HttpRequest, domain: Domain) -> None:
        domain_mark_verified(domain=domain, actor=f"{request.user.get_username()} (operator override)"[:150])
        self.log_change(request, domain, "Marked verified (operator override)")
        self.message_user(request, f"{domain.name} marked verified by {request.user.get_username()}.", messages.SUCCESS)

    @admin.action(description="Check DNS", permissions=["change"])
    def check_dns(self, request: HttpRequest, queryset: QuerySet[Domain]) -> HttpResponse:
        return self._render_dns_checks(request, list(queryset))

    @admin.action(description="Mark verified (operator override)", permissions=["change"])
    def mark_verified(self, request: HttpRequest, queryset: QuerySet[Domain]) -> None:
        for domain in queryset:
            self._mark_verified(request, domain)


class SourcePoolForm(forms.ModelForm):
    """The pool's addresses are picked among MAILSERVICE_SOURCE_ADDRESSES, so no other can be named."""

    addresses = forms.MultipleChoiceField(
        choices=(), widget=forms.CheckboxSelectMultiple, help_text="The source addresses of this pool"
    )

    class Meta:
        model = SourcePool
        fields = ["name", "addresses"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["addresses"]
        assert isinstance(field, forms.MultipleChoiceField)
        field.choices = [(address, address) for address in settings.MAILSERVICE_SOURCE_ADDRESSES]


@admin.register(SourcePool)
class SourcePoolAdmin(ConsoleModelAdmin):
    """Named subsets of the source addresses; a domain is assigned to one on its own page."""

    form = SourcePoolForm
    list_display = ["name", "address_list", "domain_count"]
    search_fields = ["name"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[SourcePool]:
        return super().get_queryset(request).annotate(domain_total=Count("domains"))

    @admin.display(description="Addresses")
    def address_list(self, pool: SourcePool) -> str:
        return ", ".join(pool.addresses) or "—"

    @admin.display(description="Domains")
    def domain_count(self, pool: SourcePool) -> int:
        return pool.domain_total  # type: ignore[attr-defined]  # annotated by get_queryset

    def save_model(self, request: HttpRequest, obj: SourcePool, form: forms.ModelForm, change: bool) -> None:
        source_pool_save(pool=obj, addresses=form.cleaned_data["addresses"])

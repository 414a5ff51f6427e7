"""The console's domain pages, registered here once: domains/admin.py's DomainAdmin (state and usage,
DNS records, the sending switches) with the mail's side of them, which only messaging knows: bounce
and complaint rates, the way mail leaves and the relay's rate, held destinations, source addresses,
the reports received, and the refusal to delete a domain with messages. domains sits below messaging
and never imports it, so the page is put together and registered up here.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from domains.admin import DomainAdmin, DomainChangeList
from domains.models import Domain
from mailservice.charts import REPORT_COLORS, line_chart
from mailservice.console import (
    refuse,
)
from mailservice.errors import ApiError

# What a list row shows; bodies and raw source stay in the database until a detail page asks.
from messaging.admin.sources import source_rows
from messaging.inbound.aggregate.selectors import (
    SUMMARY_DAYS,
    dmarc_daily,
    dmarc_failing_sources,
    dmarc_summary,
    tls_summary,
)
from messaging.models import Message
from messaging.outbound.domain_holds import held_destinations
from messaging.outbound.fleet_limits import relay_rate_status
from messaging.outbound.overview import destination_overview
from messaging.outbound.transports import delivery_mode
from messaging.readiness.check import REFUSAL_DAYS, domain_readiness
from messaging.readiness.dns_checks import REPORT_MAILBOX, TLS_REPORT_MAILBOX
from messaging.selectors import delivery_rates, domain_refusal_health

FAILING_SOURCES_PAGE = 50  # rows of the failing sources' table per page: a forged report's 50,000 stay off the page


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
    """A row of the Destinations page from a destination's status (direct.destinations.destination_status)."""
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


def _reports_context(domain: Domain, request: HttpRequest) -> dict[str, Any]:
    """The domain page's DMARC and TLS reports: the `rua` to publish, the last 30 days' volume and
    pass rate per day, and a page of the sources that fail DMARC with their reverse names. Only
    authenticated reports count unless the page is asked for all (`?reports=all`)."""
    include_unauthenticated = request.GET.get("reports") == "all"
    return_path = settings.MAILSERVICE_RETURN_PATH_DOMAIN
    daily = dmarc_daily(domain=domain, include_unauthenticated=include_unauthenticated)
    by_day = {day: (messages, passed) for day, messages, passed in daily}
    last = timezone.now().date()
    days = [last - timedelta(days=back) for back in range(SUMMARY_DAYS - 1, -1, -1)]
    labels = [f"{day:%m-%d}" for day in days]
    # A day no report covered is a gap in both charts, not a day of 0 messages and a 0 % pass rate.
    volume: dict[str, list[int | None]] = {
        "messages": [by_day[day][0] if day in by_day else None for day in days],
        "dmarc pass": [by_day[day][1] if day in by_day else None for day in days],
    }
    rate: dict[str, list[int | None]] = {
        "pass rate %": [round(100 * p / m) if m else None for m, p in (by_day.get(day, (0, 0)) for day in days)]
    }
    summary = dmarc_summary(domain=domain, include_unauthenticated=include_unauthenticated, with_sources=False)
    failing = Paginator(
        dmarc_failing_sources(domain=domain, include_unauthenticated=include_unauthenticated), FAILING_SOURCES_PAGE
    )
    return {
        "report_rua": {
            "dmarc": f"mailto:{REPORT_MAILBOX}@{return_path}" if return_path else "",
            "tls": f"mailto:{TLS_REPORT_MAILBOX}@{return_path}" if return_path else "",
        },
        "dmarc_summary": summary,
        "reports_include_unauthenticated": include_unauthenticated,
        "dmarc_failing": failing.get_page(request.GET.get("failing_page")),
        "dmarc_volume_chart": line_chart(
            title="DMARC-reported messages per day",
            unit="messages a day",
            labels=labels,
            series=volume,
            colors=REPORT_COLORS,
        ),
        "dmarc_rate_chart": line_chart(
            title="DMARC pass rate per day (%)",
            unit="% of the day's messages",
            labels=labels,
            series=rate,
            colors=REPORT_COLORS,
        ),
        "tls_summary": tls_summary(domain=domain, include_unauthenticated=include_unauthenticated),
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
        outbox = not settings.EMAIL_URL  # the file outbox: nothing leaves, so there is no destination
        rows = [_destination_row(status) for status in overview.destinations]
        if not overview.direct:
            rows = [_destination_row({**overview.relay, "name": "the relay", "mx_hosts": [], "last_error": ""})]
        context = {
            **self.admin_site.each_context(request),
            "title": "Destinations",
            "overview": overview,
            "outbox": outbox,
            "rows": [] if outbox else rows,
            "sources": source_rows() if overview.direct else [],
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
        reports = {}
        if domain is not None and self.has_view_permission(request, domain):
            health = domain_refusal_health(domain=domain, days=REFUSAL_DAYS)
            messages_url = f"{reverse('admin:messaging_message_changelist')}?domain__id__exact={domain.pk}"
            reports = {
                **_reports_context(domain, request),
                "refusal_health": health,
                "refusal_messages_url": messages_url,
            }
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


admin.site.register(Domain, DomainMailAdmin)

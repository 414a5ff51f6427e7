"""Direct delivery's source addresses in the console: each with its pools, warm-up day and today's counts."""

from datetime import date
from typing import Any

from django.contrib import admin
from django.contrib.admin.views.main import ChangeList
from django.http import HttpRequest, HttpResponse

from domains.models import SourceAddress, SourcePool
from mailservice.console import (
    ConsoleModelAdmin,
)
from messaging.outbound.direct.sources import (
    configured_addresses,
    counts_today,
    source_address_rows,
    source_of,
    today,
    warmup_cap,
)

# What a list row shows; bodies and raw source stay in the database until a detail page asks.


def _warmup_text(row: SourceAddress, day: date) -> str:
    cap = warmup_cap(row, day)
    if cap is None:
        return "warm"
    if row.warmup_started is None:
        return f"starts at its first send ({cap} per destination on day 1)"
    return f"day {max(0, (day - row.warmup_started).days) + 1}: {cap} per destination"


def source_rows() -> list[dict]:
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

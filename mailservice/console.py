"""What the operator console's admin pages share: refusals, sandboxed HTML, cheap pagination."""

import json
from datetime import datetime

from django.contrib import admin
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString


def refuse(request: HttpRequest, message: str) -> TemplateResponse:
    """A 403 in the console's own look (the project's 403 handler answers in the API's JSON)."""
    context = {**admin.site.each_context(request), "title": "Not allowed", "message": message}
    return TemplateResponse(request, "admin/mailservice/refused.html", context, status=403)


def sandboxed_html(html: str | None, *, height: int = 400) -> SafeString | str:
    """Untrusted email HTML in an iframe with every sandbox restriction: no scripts, no same origin, no forms."""
    if not html:
        return "—"
    return format_html(
        '<iframe class="ms-html" sandbox="" referrerpolicy="no-referrer" srcdoc="{}" style="width:100%;height:{}px;'
        'border:1px solid var(--border-color);background:#fff"></iframe>',
        html,
        height,
    )


def console_time(value: datetime | None) -> str:
    """Every date the console shows: to the second and with its zone, so events line up with logs."""
    return "—" if value is None else f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}"


def adopt(obj: Model, created: Model) -> None:
    """Turn the admin's unsaved form instance into the row a service created, for the admin's redirect and log."""
    obj.pk = created.pk
    obj.refresh_from_db()


class EstimatedCountPaginator(Paginator):
    """Pages without a full-table COUNT(*): exact counts up to EXACT_LIMIT rows, PostgreSQL's estimate beyond.

    Unfiltered lists read the table's row estimate from pg_class.reltuples; filtered ones ask the
    planner (EXPLAIN). Estimated page counts can be off, so the last pages may be short or empty.
    """

    EXACT_LIMIT = 10_000

    @cached_property
    def count(self) -> int:
        queryset = self.object_list
        if not isinstance(queryset, QuerySet):
            return super().count
        bounded = queryset.order_by()[: self.EXACT_LIMIT + 1].count()
        if bounded <= self.EXACT_LIMIT or connection.vendor != "postgresql":
            return bounded
        return max(bounded, self._estimate(queryset))

    @staticmethod
    def _estimate(queryset: QuerySet) -> int:
        with connection.cursor() as cursor:
            if not queryset.query.where:
                cursor.execute(
                    "SELECT reltuples::bigint FROM pg_class WHERE oid = %s::regclass", [queryset.model._meta.db_table]
                )
                return int(cursor.fetchone()[0])
            sql, params = queryset.order_by().query.sql_with_params()
            cursor.execute(f"EXPLAIN (FORMAT JSON) {sql}", params)
            plan = cursor.fetchone()[0]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            return int(plan[0]["Plan"]["Plan Rows"])

"""What the operator console's admin pages share: refusals, sandboxed HTML, cheap pagination."""

import json

from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Model, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString

# The query-string lookups each kind of list filter uses (django.contrib.admin.filters).
_FILTER_LOOKUPS = ("exact", "isnull", "isempty", "gte", "lt")


class ConsoleModelAdmin(admin.ModelAdmin):
    """The base of every console ModelAdmin: it takes from the query string only the lookups its
    list filters use.

    Django's own `lookup_allowed` accepts any lookup on a model's own fields, so
    `?dkim_private_key__regex=^-----BEGIN[ -M]` listed a domain only when a guess matched: a staff
    user could read any column, secrets included, one character at a time. Anything else is
    `DisallowedModelAdminLookup`, a 400 whatever the guess. Searching (`?q=`) is not a lookup and
    only reaches `search_fields`. Every registered ModelAdmin derives from this
    (tests/console/test_secret_lookups.py checks that)."""

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        return lookup in self.filter_parameters()

    def filter_parameters(self) -> set[str]:
        allowed: set[str] = set()
        for entry in self.list_filter:
            if isinstance(entry, type) and issubclass(entry, admin.SimpleListFilter):
                allowed.add(str(entry.parameter_name))
                continue
            path = entry[0] if isinstance(entry, (tuple, list)) else entry
            allowed.update(f"{path}__{lookup}" for lookup in _FILTER_LOOKUPS)
            field = get_fields_from_path(self.model, path)[-1]
            if field.is_relation:
                allowed.add(f"{path}__{field.target_field.name}__exact")
        return allowed


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

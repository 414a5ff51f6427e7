"""What the operator console's admin pages share: refusals, sandboxed HTML, cheap pagination."""

import json
import re
from datetime import datetime
from typing import Any
from urllib.parse import quote

import lxml.html
from django.contrib import admin
from django.contrib.admin.utils import get_fields_from_path
from django.core.paginator import Paginator
from django.db import connection
from django.db.models import Model, QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString
from lxml import etree

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

    class Media:
        css = {"all": ["mailservice/console.css"]}  # long values cut to keep the list's columns in view

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        if remote_images_requested(request):  # the operator chose to load a preview's remote images
            setattr(response, "_csp_update", REMOTE_IMAGES_CSP)  # noqa: B010 - the attribute django-csp reads
        return response

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        return lookup in self.filter_parameters()

    def filter_parameters(self) -> set[str]:
        allowed: set[str] = set()
        for entry in self.list_filter:
            if isinstance(entry, type) and issubclass(entry, admin.SimpleListFilter):
                allowed.add(str(entry.parameter_name))
                continue
            path = str(entry[0] if isinstance(entry, (tuple, list)) else entry)
            # The bare field name is its exact lookup (links such as ?status=failed use it).
            allowed.update([path, *(f"{path}__{lookup}" for lookup in _FILTER_LOOKUPS)])
            field: Any = get_fields_from_path(self.model, path)[-1]
            if field.is_relation:
                allowed.add(f"{path}__{field.target_field.name}__exact")
        return allowed


def refuse(request: HttpRequest, message: str) -> TemplateResponse:
    """A 403 in the console's own look (the project's 403 handler answers in the API's JSON)."""
    context = {**admin.site.each_context(request), "title": "Not allowed", "message": message}
    return TemplateResponse(request, "admin/mailservice/refused.html", context, status=403)


# Inside a preview: nothing from anywhere but the message itself (inline styles, data: images).
# A srcdoc document also inherits the console page's own policy, which is as strict for images.
_PREVIEW_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
# The same, once the operator has chosen to load the message's remote images.
_PREVIEW_POLICY_WITH_IMAGES = "default-src 'none'; style-src 'unsafe-inline'; img-src data: http: https:"
REMOTE_IMAGES_PARAMETER = "remote_images"
# What the console page itself allows while the operator looks at a message's remote images.
REMOTE_IMAGES_CSP = {"img-src": ["http:", "https:"]}
_PLACEHOLDER = "data:image/svg+xml," + quote(
    '<svg xmlns="http://www.w3.org/2000/svg" width="120" height="40"><rect width="120" height="40" '
    'fill="#eee" stroke="#999"/><text x="60" y="25" font-size="11" text-anchor="middle" '
    'font-family="sans-serif" fill="#555">remote image</text></svg>'
)
_REMOTE = re.compile(r"\s*(?:[a-z][a-z0-9+.-]*:|//)", re.IGNORECASE)


def _is_remote(url: str) -> bool:
    """Anything that names a resource elsewhere (http:, https:, //host, ftp:...); data: and cid: are in the message."""
    return bool(_REMOTE.match(url)) and not url.strip().lower().startswith(("data:", "cid:"))


def _without_remote_images(html: str) -> tuple[str, int]:
    """(the HTML with each remote image replaced by a placeholder, how many were replaced).

    libxml2 (lxml) parses in linear time and stops nesting at 256 levels. selectolax's lexbor was
    measured quadratic here on nested elements (200 KB of `<div>`: 2.9 s; an API send may carry
    4 MiB), and a hostile sender's HTML must not cost the operator's page minutes. What lies deeper
    than libxml2 reads is dropped from the preview; the preview's own policy blocks remote loads anyway."""
    if not html.strip():
        return html, 0
    try:
        root = lxml.html.document_fromstring(html)
    except etree.ParserError:
        return html, 0
    replaced = 0
    for node in root.iter("img", "input", "source"):
        if node.tag == "input" and (node.get("type") or "").lower() != "image":
            continue
        remote = [name for name in ("src", "srcset") if _is_remote(node.get(name) or "")]
        if not remote:
            continue
        replaced += 1
        if "srcset" in remote:
            del node.attrib["srcset"]
        if node.tag != "source":
            node.set("title", f"remote image: {node.get('src') or ''}"[:300])
            node.set("src", _PLACEHOLDER)
    return (lxml.html.tostring(root, encoding="unicode"), replaced) if replaced else (html, 0)


def sandboxed_html(html: str | None, *, height: int = 400, remote_images: bool = False) -> SafeString | str:
    """Untrusted email HTML in an iframe with every sandbox restriction (no scripts, no same origin,
    no forms) that loads nothing from elsewhere: its own Content-Security-Policy, and remote images
    replaced by a placeholder until the operator chooses to load them (`?remote_images=1`, which
    the page's own policy must then allow: REMOTE_IMAGES_CSP)."""
    if not html:
        return "—"
    replaced = 0
    if not remote_images:
        html, replaced = _without_remote_images(html)
    policy = _PREVIEW_POLICY_WITH_IMAGES if remote_images else _PREVIEW_POLICY
    document = f'<meta http-equiv="Content-Security-Policy" content="{policy}">{html}'
    frame = format_html(
        '<iframe class="ms-html" sandbox="" referrerpolicy="no-referrer" srcdoc="{}" style="width:100%;height:{}px;'
        'border:1px solid var(--border-color);background:#fff"></iframe>',
        document,
        height,
    )
    if not replaced:
        return frame
    return format_html(
        '{}<p class="help" id="remote-images">{} remote image(s) not loaded: loading them tells the sender '
        'that, when and from where this message was read. <a href="?{}=1">Load remote images</a></p>',
        frame,
        replaced,
        REMOTE_IMAGES_PARAMETER,
    )


def remote_images_requested(request: HttpRequest) -> bool:
    return request.GET.get(REMOTE_IMAGES_PARAMETER) == "1"


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

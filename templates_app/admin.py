"""Templates in the console: versions, drafts previewed with sample variables, publish and unpublish."""

import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.options import InlineModelAdmin
from django.db.models import Count, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import path, reverse
from django.utils.html import format_html

from mailservice.console import ConsoleModelAdmin, adopt, refuse, remote_images_requested, sandboxed_html
from mailservice.errors import ApiError
from templates_app.models import Template, TemplateVersion
from templates_app.selectors import sample_variables
from templates_app.services import (
    RenderedContent,
    template_content_check,
    template_render,
    template_version_create,
    template_version_publish,
    template_version_set_published,
)

PLACEHOLDER_HELP = (
    "Placeholders such as {{ name }} (a letter, then letters, digits or _) are filled from the send's "
    '"template": {"variables": {"name": "Ada"}}; every placeholder needs a value, and values are '
    "HTML-escaped in the HTML part."
)


def _clean_content(cleaned: dict[str, Any] | None) -> dict[str, Any]:
    """The service's checks on a version's content, shown as form errors rather than failing the save."""
    cleaned = cleaned or {}
    if not cleaned.get("text") and not cleaned.get("html"):
        raise forms.ValidationError("A template version needs text or html (or both).")
    if "subject" in cleaned:
        try:
            template_content_check(
                subject=cleaned["subject"], text=cleaned.get("text") or "", html=cleaned.get("html") or ""
            )
        except ApiError as exc:
            raise forms.ValidationError(exc.message) from None
    return cleaned


class TemplateAddForm(forms.ModelForm):
    """A template and its first version on one page."""

    subject = forms.CharField(max_length=1000, help_text=PLACEHOLDER_HELP)
    text = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 8}), help_text="Plain-text body")
    html = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 8}), help_text="HTML body")
    publish = forms.BooleanField(
        required=False, initial=True, help_text="Sends can use a version once it is published (unticked: a draft)"
    )

    class Meta:
        model = Template
        fields = ["domain", "slug"]

    def clean(self) -> dict[str, Any]:
        return _clean_content(super().clean())


class TemplateVersionInline(admin.TabularInline):
    model = TemplateVersion
    fields = ("number", "subject", "published", "published_at", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # new versions go through the version form, which numbers them


@admin.register(Template)
class TemplateAdmin(ConsoleModelAdmin):
    list_display = ["slug", "public_id", "domain", "version_count", "created_at"]
    list_filter = ["domain"]
    list_select_related = ["domain"]
    search_fields = ["slug", "public_id"]
    show_full_result_count = False
    inlines = [TemplateVersionInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Template]:
        return super().get_queryset(request).annotate(version_count=Count("versions"))

    @admin.display(description="Versions", ordering="version_count")
    def version_count(self, template: Template) -> int:
        return template.version_count  # type: ignore[attr-defined]  # annotated by get_queryset

    @admin.display(description="Use in /v1/send")
    def api_usage(self, template: Template) -> str:
        return format_html(
            '<code>"template": {{"id": "{}"}}</code> or <code>"template": {{"id": "{}"}}</code><br>'
            '<a class="button" href="{}?template={}">Add a new version</a>',
            template.slug,
            template.public_id,
            reverse("admin:templates_app_templateversion_add"),
            template.pk,
        )

    def get_fields(self, request: HttpRequest, obj: Template | None = None) -> list[str]:
        if obj is None:
            return ["domain", "slug", "subject", "text", "html", "publish"]
        return ["domain", "slug", "public_id", "api_usage", "created_at"]

    def get_form(self, request: HttpRequest, obj: Template | None = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = TemplateAddForm
            kwargs["fields"] = ["domain", "slug"]
        return super().get_form(request, obj, change, **kwargs)

    def get_inlines(self, request: HttpRequest, obj: Template | None) -> list[type[InlineModelAdmin]]:
        return [] if obj is None else self.inlines

    def save_model(self, request: HttpRequest, obj: Template, form: forms.ModelForm, change: bool) -> None:
        data = form.cleaned_data
        version = template_version_publish(
            domain=data["domain"],
            slug=data["slug"],
            subject=data["subject"],
            text=data["text"],
            html=data["html"],
            published=data["publish"],
        )
        adopt(obj, version.template)

    def get_readonly_fields(self, request: HttpRequest, obj: Template | None = None) -> list[str]:
        # Senders address a template by slug or id, so neither changes once it exists.
        return [] if obj is None else ["domain", "slug", "public_id", "api_usage", "created_at"]


class TemplateVersionAddForm(forms.ModelForm):
    class Meta:
        model = TemplateVersion
        fields = ["template", "subject", "text", "html"]
        help_texts = {"subject": PLACEHOLDER_HELP}

    def clean(self) -> dict[str, Any]:
        return _clean_content(super().clean())


class PreviewForm(forms.Form):
    variables = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80, "style": "font-family:monospace"}),
        help_text='Sample variables as a JSON object, e.g. {"name": "Ada"}',
    )


def _parse_variables(raw: str) -> dict[str, Any]:
    try:
        variables = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"Sample variables are not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(variables, dict) or not all(
        isinstance(value, str | int | float | bool) for value in variables.values()
    ):
        raise ValueError("Sample variables must be a JSON object of strings, numbers or booleans")
    return variables


@admin.register(TemplateVersion)
class TemplateVersionAdmin(ConsoleModelAdmin):
    list_display = ["__str__", "template", "number", "subject", "published", "published_at", "created_at"]
    list_filter = ["published", "template__domain"]
    list_select_related = ["template", "template__domain"]
    search_fields = ["template__slug", "template__public_id", "subject"]
    show_full_result_count = False
    actions = ["publish", "unpublish"]
    change_fields = ["template", "number", "published", "published_at", "subject", "text", "html", "created_at"]

    def get_fields(self, request: HttpRequest, obj: TemplateVersion | None = None) -> list[str]:
        return ["template", "subject", "text", "html"] if obj is None else self.change_fields

    def get_readonly_fields(self, request: HttpRequest, obj: TemplateVersion | None = None) -> list[str]:
        # A version is immutable once created (messages record which one they used): edit by adding a version.
        return [] if obj is None else self.change_fields

    def get_form(
        self, request: HttpRequest, obj: TemplateVersion | None = None, change: bool = False, **kwargs: Any
    ) -> Any:
        if obj is None:
            kwargs["form"] = TemplateVersionAddForm
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: TemplateVersion, form: forms.ModelForm, change: bool) -> None:
        data = form.cleaned_data
        created = template_version_create(
            template=data["template"], subject=data["subject"], text=data["text"], html=data["html"]
        )
        adopt(obj, created)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict | None = None
    ) -> HttpResponse:
        version = self.get_object(request, object_id)
        # Versions are immutable, so the page offers publish and preview but no save buttons.
        context = {
            "show_save": False,
            "show_save_and_continue": False,
            "show_save_and_add_another": False,
            **(extra_context or {}),
            **(self._preview(request, version) if version else {}),
        }
        return super().change_view(request, object_id, form_url, context)

    def _preview(self, request: HttpRequest, version: TemplateVersion) -> dict[str, Any]:
        raw = request.GET.get("variables") or json.dumps(sample_variables(version=version))
        context: dict[str, Any] = {"preview_form": PreviewForm(initial={"variables": raw})}
        try:
            rendered: RenderedContent = template_render(version=version, variables=_parse_variables(raw))
        except (ValueError, ApiError) as exc:
            context["preview_error"] = exc.message if isinstance(exc, ApiError) else str(exc)
            return context
        context["preview"] = {
            "subject": rendered.subject,
            "text": rendered.text,
            "html": sandboxed_html(rendered.html, remote_images=remote_images_requested(request)),
        }
        return context

    def get_urls(self) -> list:
        view = self.admin_site.admin_view
        return [
            path(
                "<int:object_id>/publish/",
                view(self.publish_view),
                {"published": True},
                name="templates_version_publish",
            ),
            path(
                "<int:object_id>/unpublish/",
                view(self.publish_view),
                {"published": False},
                name="templates_version_unpublish",
            ),
            *super().get_urls(),
        ]

    def publish_view(self, request: HttpRequest, object_id: int, published: bool) -> HttpResponse:
        version = self.get_object(request, str(object_id))
        if request.method != "POST" or version is None or not self.has_change_permission(request, version):
            return refuse(request, "Publishing needs a POST from an operator who may change templates.")
        self._set_published(request, [version], published=published)
        return HttpResponseRedirect(reverse("admin:templates_app_templateversion_change", args=[version.pk]))

    def _set_published(self, request: HttpRequest, versions: Any, *, published: bool) -> None:
        for version in versions:
            template_version_set_published(version=version, published=published)
            self.log_change(request, version, "Published" if published else "Unpublished")
            self.message_user(request, f"{version} {'published' if published else 'unpublished'}.", messages.SUCCESS)

    @admin.action(description="Publish selected versions", permissions=["change"])
    def publish(self, request: HttpRequest, queryset: QuerySet[TemplateVersion]) -> None:
        self._set_published(request, queryset, published=True)

    @admin.action(description="Unpublish selected versions", permissions=["change"])
    def unpublish(self, request: HttpRequest, queryset: QuerySet[TemplateVersion]) -> None:
        self._set_published(request, queryset, published=False)

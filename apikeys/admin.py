"""API keys in the console: created through the service, the secret shown once, revoked by action."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils.html import format_html

from apikeys.models import ApiKey, Permission
from apikeys.services import apikey_create, apikey_revoke
from mailservice.console import adopt


class ApiKeyAddForm(forms.ModelForm):
    permissions = forms.MultipleChoiceField(
        choices=Permission.choices,
        initial=Permission.values,
        widget=forms.CheckboxSelectMultiple,
        help_text="email.send: POST /v1/send; email.read: GET /v1/messages",
    )

    class Meta:
        model = ApiKey
        fields = ["domain", "name", "is_test"]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin):
    list_display = [
        "public_id",
        "name",
        "domain",
        "key_prefix",
        "permission_list",
        "is_test",
        "last_used_at",
        "state",
        "created_at",
    ]
    list_filter = ["domain", "is_test", ("revoked_at", admin.EmptyFieldListFilter)]
    list_select_related = ["domain"]
    search_fields = ["public_id", "name", "prefix", "domain__name"]
    show_full_result_count = False
    actions = ["revoke"]
    # Everything a key is besides its secret; the digest is never shown or edited either.
    exclude = ["secret_hash"]
    change_fields = [
        "public_id",
        "domain",
        "name",
        "key_prefix",
        "permission_list",
        "is_test",
        "last_used_at",
        "revoked_at",
        "created_at",
    ]

    @admin.display(description="Key")
    def key_prefix(self, api_key: ApiKey) -> str:
        return format_html("<code>ms_{}_…</code>", api_key.prefix)

    @admin.display(description="Permissions")
    def permission_list(self, api_key: ApiKey) -> str:
        return ", ".join(api_key.permissions)

    @admin.display(description="State", ordering="revoked_at")
    def state(self, api_key: ApiKey) -> str:
        return f"revoked {api_key.revoked_at:%Y-%m-%d %H:%M}" if api_key.revoked_at else "active"

    def get_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        return ["domain", "name", "permissions", "is_test"] if obj is None else self.change_fields

    def get_readonly_fields(self, request: HttpRequest, obj: ApiKey | None = None) -> list[str]:
        # A key's domain and permissions are fixed: a different key is a new key.
        return [] if obj is None else [field for field in self.change_fields if field != "name"]

    def get_form(self, request: HttpRequest, obj: ApiKey | None = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is None:
            kwargs["form"] = ApiKeyAddForm
            kwargs["fields"] = ["domain", "name", "is_test"]
        return super().get_form(request, obj, change, **kwargs)

    def save_model(self, request: HttpRequest, obj: ApiKey, form: forms.ModelForm, change: bool) -> None:
        if change:
            obj.save(update_fields=["name", "updated_at"])
            return
        created = apikey_create(
            domain=form.cleaned_data["domain"],
            name=form.cleaned_data["name"],
            permissions=form.cleaned_data["permissions"],
            is_test=form.cleaned_data["is_test"],
        )
        adopt(obj, created.api_key)
        obj.secret = created.secret  # for response_add only; never saved

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        """The one page that ever shows the secret: rendered in reply to the POST, not behind a redirect."""
        context = {**self.admin_site.each_context(request), "opts": self.opts, "title": "API key created", "key": obj}
        response = TemplateResponse(request, "admin/apikeys/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset.filter(revoked_at__isnull=True):
            apikey_revoke(api_key=api_key)
            self.log_change(request, api_key, "Revoked")
        self.message_user(request, "The selected keys are revoked; requests with them now get 401.", messages.SUCCESS)

"""API keys in the console: created through the service, the secret shown once, revoked by action."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html

from apikeys.models import ApiKey, Permission
from apikeys.services import apikey_create, apikey_revoke
from mailservice.console import ConsoleModelAdmin, adopt, console_time, refuse
from mailservice.encryption import decrypt_secret, encrypt_secret

# The session key that carries a new key's secret from the add POST to the one page that shows it.
_SESSION_SECRET = "apikeys_created_secret"  # noqa: S105 - a session key name, not a secret


class ApiKeyAddForm(forms.ModelForm):
    permissions = forms.MultipleChoiceField(
        choices=Permission.choices,
        initial=[Permission.SEND, Permission.READ],
        widget=forms.CheckboxSelectMultiple,
        help_text="email.send: POST /v1/send; email.read: GET /v1/messages, /v1/suppressions, /v1/events; "
        "suppressions.write: PUT and DELETE /v1/suppressions/{email}",
    )

    class Meta:
        model = ApiKey
        fields = ["domain", "name", "is_test"]


@admin.register(ApiKey)
class ApiKeyAdmin(ConsoleModelAdmin):
    # The prefix is how operators and logs name a key; the public id stays on the key's page.
    list_display = ["key_prefix", "name", "domain", "permission_list", "is_test", "state", "last_used", "created"]
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
        return f"revoked {console_time(api_key.revoked_at)}" if api_key.revoked_at else "active"

    @admin.display(description="Last used", ordering="last_used_at")
    def last_used(self, api_key: ApiKey) -> str:
        return console_time(api_key.last_used_at)

    @admin.display(description="Created", ordering="created_at")
    def created(self, api_key: ApiKey) -> str:
        return console_time(api_key.created_at)

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
        obj.secret = created.secret  # type: ignore[attr-defined]  # for response_add only; never saved

    def get_urls(self) -> list[URLPattern]:
        own = [
            path("<int:pk>/created/", self.admin_site.admin_view(self.created_view), name="apikeys_apikey_created"),
            path("<int:pk>/revoke/", self.admin_site.admin_view(self.revoke_view), name="apikeys_apikey_revoke"),
        ]
        return own + super().get_urls()

    def response_add(self, request: HttpRequest, obj: ApiKey, post_url_continue: str | None = None) -> HttpResponse:
        """POST-redirect-GET: the secret rides in the operator's session to exactly one page view.

        The created page takes it out of the session as it renders, so a reload shows no secret and
        mints no second key; the session row holds it only between the redirect and that GET.
        """
        # Encrypted like every stored secret: the session row sits in the database until that GET.
        secret = encrypt_secret(obj.secret)  # type: ignore[attr-defined]  # set by save_model, never saved
        request.session[_SESSION_SECRET] = {"pk": obj.pk, "secret": secret}
        return HttpResponseRedirect(reverse("admin:apikeys_apikey_created", args=[obj.pk]))

    def created_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        if not self.has_add_permission(request):
            return refuse(request, "Your account cannot create API keys.")
        api_key = get_object_or_404(ApiKey.objects.select_related("domain"), pk=pk)
        shown = request.session.pop(_SESSION_SECRET, None)
        context = {
            "secret": decrypt_secret(shown["secret"]) if shown and shown["pk"] == api_key.pk else None,
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "API key created",
            "key": api_key,
        }
        response = TemplateResponse(request, "admin/apikeys/apikey/created.html", context)
        response["Cache-Control"] = "no-store"
        return response

    def revoke_view(self, request: HttpRequest, pk: int) -> HttpResponse:
        """The key's own Revoke button: a confirmation page (GET), then the revocation (POST)."""
        api_key = get_object_or_404(ApiKey.objects.select_related("domain"), pk=pk)
        if not self.has_change_permission(request, api_key):
            return refuse(request, "Your account cannot revoke API keys.")
        change_url = reverse("admin:apikeys_apikey_change", args=[api_key.pk])
        if request.method == "POST":
            if api_key.revoked_at is None:
                apikey_revoke(api_key=api_key)
                self.log_change(request, api_key, "Revoked")
            self.message_user(request, f"Key {api_key} is revoked; requests with it now get 401.", messages.SUCCESS)
            return HttpResponseRedirect(change_url)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Revoke this API key?",
            "key": api_key,
            "change_url": change_url,
        }
        return TemplateResponse(request, "admin/apikeys/apikey/revoke_confirmation.html", context)

    @admin.action(description="Revoke selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset.filter(revoked_at__isnull=True):
            apikey_revoke(api_key=api_key)
            self.log_change(request, api_key, "Revoked")
        self.message_user(request, "The selected keys are revoked; requests with them now get 401.", messages.SUCCESS)

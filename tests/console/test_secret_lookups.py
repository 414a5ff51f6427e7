"""Secrets are not queryable through the console: every registered admin takes only the lookups its
list filters use, so `?<field>__<lookup>=` on any column, tried as a superuser and as support, never
gives an answer that depends on a secret. No console page shows a private key or a key hash."""

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.urls import reverse

from mailservice.console import ConsoleModelAdmin
from mailservice.encryption import decrypt_secret
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db

# Columns whose value must never decide an answer.
SECRETS = {
    ("domains", "dkimkey", "private_key"),
    ("apikeys", "apikey", "secret_hash"),
    ("auth", "user", "password"),
}
LOOKUPS = ["exact", "regex", "startswith", "gt", "isnull"]


@pytest.fixture
def rows(admin_user):
    key = ApiKeyFactory()
    MessageFactory(domain=key.domain)
    return key


def _registered() -> list[tuple[type, admin.ModelAdmin]]:
    return list(admin.site._registry.items())


def _changelist(model: type) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def _fields(model: type) -> list[str]:
    return [field.name for field in model._meta.get_fields()]


def test_every_registered_admin_restricts_lookups():
    assert [type(ma).__name__ for _, ma in _registered() if not isinstance(ma, ConsoleModelAdmin)] == []


@pytest.mark.parametrize("who", ["operator", "support"])
def test_no_lookup_outside_the_list_filters_is_taken_on_any_field_of_any_model(request, rows, who):
    client = request.getfixturevalue(who)
    for model, model_admin in _registered():
        allowed = model_admin.filter_parameters()
        for name in _fields(model):
            for lookup in LOOKUPS:
                parameter = f"{name}__{lookup}"
                if parameter in allowed:
                    assert (model._meta.app_label, model._meta.model_name, name) not in SECRETS
                    continue
                response = client.get(_changelist(model), {parameter: "x"})
                # 400: the lookup is refused before any query; 403: support cannot open this list at all.
                assert response.status_code in (400, 403), (model.__name__, parameter, response.status_code)


@pytest.mark.parametrize("who", ["operator", "support"])
def test_guessing_a_secret_gets_the_same_answer_right_or_wrong(request, rows, who):
    client = request.getfixturevalue(who)
    domain, user = rows.domain, User.objects.filter(is_superuser=True).first()
    cases = [
        # Through the relation: the encrypted key is reachable from the domain list only by a join.
        ("domains", "domain", "dkim_keys__private_key", domain.dkim_keys.get().private_key[:20]),
        ("apikeys", "apikey", "secret_hash", rows.secret_hash[:4]),
        ("auth", "user", "password", user.password[:6]),
    ]
    for app, model, field, prefix in cases:
        path = reverse(f"admin:{app}_{model}_changelist")
        right = client.get(path, {f"{field}__startswith": prefix})
        wrong = client.get(path, {f"{field}__startswith": "zz-not-it"})
        assert right.status_code == wrong.status_code
        assert right.status_code in (400, 403)
        if right.status_code == 400:  # the JSON error envelope: the same code and message either way
            assert right.json()["error"]["code"] == wrong.json()["error"]["code"] == "BadRequest"


def test_the_list_filters_still_work(operator):
    verified = DomainFactory(name="verified.example", verified=True)
    DomainFactory(name="pending.example", verified=False)

    response = operator.get(_changelist(type(verified)), {"verified__exact": "1"})

    assert response.status_code == 200
    assert b"verified.example" in response.content and b"pending.example" not in response.content


def test_no_console_page_shows_a_private_key_or_a_key_hash(operator, rows):
    domain = rows.domain
    pages = [
        reverse("admin:domains_domain_change", args=[domain.pk]),
        reverse("admin:domains_domain_changelist"),
        reverse("admin:apikeys_apikey_change", args=[rows.pk]),
        reverse("admin:apikeys_apikey_changelist"),
    ]
    pem = decrypt_secret(domain.dkim_keys.get().private_key)
    key_body = "".join(pem.splitlines()[1:-1])[:64]
    for page in pages:
        html = operator.get(page).content.decode()
        assert rows.secret_hash not in html and key_body not in html and "PRIVATE KEY" not in html, page

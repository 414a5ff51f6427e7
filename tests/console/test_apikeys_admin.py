"""API keys in the console: the secret is shown once, never stored or shown again; revocation."""

import re

import pytest

from apikeys.models import ApiKey
from apikeys.services import apikey_authenticate
from tests.factories import ApiKeyFactory

pytestmark = pytest.mark.django_db

ADD = "/admin/apikeys/apikey/add/"
LIST = "/admin/apikeys/apikey/"


def create_key(operator, domain, permissions=("email.send", "email.read")) -> tuple[ApiKey, str, object]:
    response = operator.post(
        ADD, {"domain": domain.pk, "name": "billing app", "permissions": list(permissions)}, follow=True
    )
    assert response.status_code == 200, response.content
    assert response.redirect_chain[0][0].endswith("/created/")
    secret = re.search(r'id="api-key-secret" value="(ms_[^"]+)"', response.content.decode()).group(1)
    return ApiKey.objects.get(name="billing app"), secret, response


def test_the_add_form_offers_domain_name_and_permission_checkboxes(operator, domain):
    html = operator.get(ADD).content.decode()

    assert 'name="domain"' in html and 'name="name"' in html
    assert html.count('type="checkbox" name="permissions"') == 3  # email.send, email.read, suppressions.write
    assert 'value="suppressions.write"' in html
    assert "secret_hash" not in html


def test_a_key_made_in_the_console_can_be_given_suppressions_write(operator, domain):
    api_key, _, _ = create_key(operator, domain, permissions=["email.read", "suppressions.write"])

    assert api_key.permissions == ["email.read", "suppressions.write"]


def test_creating_a_key_shows_a_working_secret_once(operator, domain):
    api_key, secret, response = create_key(operator, domain, permissions=["email.send"])

    assert response["Cache-Control"] == "no-store"
    assert apikey_authenticate(raw_key=secret) == api_key
    assert api_key.permissions == ["email.send"]
    assert secret not in str(ApiKey.objects.filter(pk=api_key.pk).values().get())
    for url in (LIST, f"{LIST}{api_key.pk}/change/", f"{LIST}?q=billing", "/admin/", f"{LIST}{api_key.pk}/history/"):
        page = operator.get(url).content.decode()
        assert secret not in page and secret[-20:] not in page
        assert api_key.secret_hash not in page


def test_reloading_the_created_page_shows_no_secret_and_mints_no_key(operator, domain):
    api_key, secret, response = create_key(operator, domain)

    reloaded = operator.get(response.redirect_chain[0][0])

    assert reloaded.status_code == 200
    assert secret not in reloaded.content.decode() and "shown once" in reloaded.content.decode()
    assert ApiKey.objects.count() == 1


def test_revoke_on_the_key_page_asks_first_then_stops_the_key(operator, full_key):
    change = operator.get(f"{LIST}{full_key.pk}/change/").content.decode()
    assert f"{LIST}{full_key.pk}/revoke/" in change

    confirmation = operator.get(f"{LIST}{full_key.pk}/revoke/")
    assert b"Yes, revoke this key" in confirmation.content
    assert apikey_authenticate(raw_key=full_key.secret) == full_key  # asking revokes nothing

    done = operator.post(f"{LIST}{full_key.pk}/revoke/", follow=True)

    assert done.redirect_chain[-1][0].endswith(f"{full_key.pk}/change/")
    assert apikey_authenticate(raw_key=full_key.secret) is None
    assert f"{LIST}{full_key.pk}/revoke/" not in done.content.decode()


def test_a_key_needs_a_permission(operator, domain):
    response = operator.post(ADD, {"domain": domain.pk, "name": "nothing", "permissions": []})

    assert response.status_code == 200 and b"This field is required" in response.content
    assert not ApiKey.objects.exists()


def test_the_list_shows_prefix_permissions_and_last_use_but_no_secret_or_hash(operator, full_key):
    apikey_authenticate(raw_key=full_key.secret)
    full_key.refresh_from_db()

    html = operator.get(LIST).content.decode()

    assert f"ms_{full_key.prefix}_…" in html and "email.send, email.read" in html
    assert full_key.secret not in html and full_key.secret_hash not in html
    assert "active" in html and full_key.last_used_at is not None


def test_the_change_page_edits_only_the_name(operator, full_key):
    url = f"{LIST}{full_key.pk}/change/"
    html = operator.get(url).content.decode()
    assert 'name="name"' in html and 'name="domain"' not in html and "secret_hash" not in html

    operator.post(url, {"name": "renamed"})

    full_key.refresh_from_db()
    assert full_key.name == "renamed" and apikey_authenticate(raw_key=full_key.secret) == full_key


def test_revoking_stops_the_key(operator, full_key, send_only_key):
    operator.post(LIST, {"action": "revoke", "_selected_action": [full_key.pk]})

    assert apikey_authenticate(raw_key=full_key.secret) is None
    assert apikey_authenticate(raw_key=send_only_key.secret) == send_only_key
    assert "revoked" in operator.get(LIST).content.decode()


def test_the_list_costs_the_same_queries_for_2_or_20_keys(operator, domain, django_assert_max_num_queries):
    ApiKeyFactory.create_batch(2, domain=domain)
    with django_assert_max_num_queries(7) as few:
        operator.get(LIST)
    ApiKeyFactory.create_batch(18)
    with django_assert_max_num_queries(len(few.captured_queries)):
        operator.get(LIST)

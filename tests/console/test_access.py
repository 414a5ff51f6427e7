"""Who gets into the console, and what the support role can and cannot do."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from domains.models import Domain, SendingControl
from domains.services import sending_pause
from tests.factories import DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db

CHANGELISTS = [
    "/admin/domains/domain/",
    "/admin/messaging/message/",
    "/admin/messaging/suppression/",
    "/admin/templates_app/template/",
    "/admin/templates_app/templateversion/",
]


@pytest.mark.parametrize("url", ["/admin/", *CHANGELISTS, "/admin/apikeys/apikey/"])
def test_anonymous_and_non_staff_users_are_sent_to_the_login_page(url):
    client = Client()
    client.force_login(User.objects.create_user("customer", password="pw"))

    for visitor in (Client(), client):
        response = visitor.get(url)
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/")


def test_a_superuser_logs_in_with_a_password(admin_user):
    client = Client()
    response = client.post("/admin/login/?next=/admin/", {"username": "admin", "password": "password"})

    assert response.status_code == 302
    assert client.get("/admin/").status_code == 200


@pytest.mark.parametrize("url", CHANGELISTS)
def test_support_reads_domains_messages_suppressions_and_templates(support, url):
    MessageFactory()

    assert support.get(url).status_code == 200


@pytest.mark.parametrize("url", ["/admin/apikeys/apikey/", "/admin/apikeys/apikey/add/", "/admin/domains/domain/add/"])
def test_support_cannot_see_or_create_api_keys_or_add_domains(support, url):
    assert support.get(url).status_code == 403


def test_support_cannot_change_a_domain(support, domain):
    form = {"daily_allowance": "5", "dispatch_weight": "1"}
    response = support.post(f"/admin/domains/domain/{domain.pk}/change/", form)

    assert response.status_code == 403
    domain.refresh_from_db()
    assert domain.daily_allowance is None


def test_support_may_pause_a_domain(support, domain):
    response = support.post(f"/admin/domains/domain/{domain.pk}/pause/", {"reason": "customer reports spam"})

    assert response.status_code == 302
    domain.refresh_from_db()
    assert (domain.sending_paused, domain.paused_by, domain.pause_reason) == (True, "sam", "customer reports spam")


@pytest.mark.parametrize("scope", ["domain", "global"])
def test_support_cannot_lift_a_pause_even_by_posting_directly(support, domain, scope):
    target = domain if scope == "domain" else None
    sending_pause(domain=target, actor="ops", reason="incident")
    url = f"/admin/domains/domain/{domain.pk}/resume/" if target else "/admin/domains/domain/sending/resume/"

    for response in (support.get(url), support.post(url)):
        assert response.status_code == 403
        assert b"You may not lift a pause on sending." in response.content

    domain.refresh_from_db()
    paused = domain.sending_paused if target else SendingControl.objects.get(pk=1).paused
    assert paused


def test_support_sees_no_mark_verified_or_check_dns_action(support):
    domain = DomainFactory(verified=False)

    for url in ("/admin/domains/domain/", f"/admin/domains/domain/{domain.pk}/change/"):
        response = support.get(url)
        assert response.status_code == 200
        for control in (b'id="check-dns"', b'id="mark-verified"', b'value="check_dns"', b'value="mark_verified"'):
            assert control not in response.content
    assert b"DNS records to publish" in response.content


def test_support_cannot_mark_a_domain_verified_by_posting_directly(support):
    domain = DomainFactory(verified=False)

    response = support.post(f"/admin/domains/domain/{domain.pk}/mark-verified/")

    assert response.status_code == 403
    assert not Domain.objects.get(pk=domain.pk).verified

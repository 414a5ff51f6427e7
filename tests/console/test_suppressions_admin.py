"""Suppressions in the console: list, add, remove, filter by domain."""

import pytest

from messaging.models import Suppression, SuppressionReason
from tests.factories import DomainFactory

pytestmark = pytest.mark.django_db

LIST = "/admin/messaging/suppression/"


def test_adding_stores_a_lower_case_bare_address(operator, domain):
    response = operator.post(
        f"{LIST}add/", {"domain": domain.pk, "address": "Bob <Bob@Example.ORG>", "reason": "manual", "detail": ""}
    )

    assert response.status_code == 302
    assert Suppression.objects.get().address == "bob@example.org"


@pytest.mark.parametrize("address", ["not an address", "bob@localhost", "a@b@c.org"])
def test_adding_a_bad_address_is_a_form_error(operator, domain, address):
    response = operator.post(f"{LIST}add/", {"domain": domain.pk, "address": address, "reason": "manual"})

    assert response.status_code == 200 and b"Enter one email address" in response.content
    assert not Suppression.objects.exists()


def test_adding_the_same_address_twice_is_a_form_error(operator, domain):
    Suppression.objects.create(domain=domain, address="bob@example.org", reason=SuppressionReason.BOUNCE)

    response = operator.post(f"{LIST}add/", {"domain": domain.pk, "address": "BOB@example.org", "reason": "manual"})

    assert response.status_code == 200 and b"already exists" in response.content


def test_removing_and_filtering_by_domain(operator, domain):
    mine = Suppression.objects.create(domain=domain, address="x@example.org", reason=SuppressionReason.BOUNCE)
    theirs = Suppression.objects.create(
        domain=DomainFactory(), address="y@example.org", reason=SuppressionReason.COMPLAINT
    )

    filtered = operator.get(LIST, {"domain__id__exact": domain.pk}).content.decode()
    assert "x@example.org" in filtered and "y@example.org" not in filtered

    operator.post(f"{LIST}{mine.pk}/delete/", {"post": "yes"})
    assert list(Suppression.objects.all()) == [theirs]


def test_support_reads_but_cannot_remove(support, domain):
    suppression = Suppression.objects.create(domain=domain, address="x@example.org", reason=SuppressionReason.BOUNCE)

    assert b"x@example.org" in support.get(LIST).content
    assert support.post(f"{LIST}{suppression.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Suppression.objects.exists()

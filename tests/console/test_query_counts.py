"""No changelist grows its query count with its rows (N+1 guard for every console list)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from messaging.models import Suppression
from tests.factories import DomainFactory, TemplateFactory, TemplateVersionFactory

pytestmark = pytest.mark.django_db


def add_suppressions(domain, count: int) -> None:
    for _ in range(count):
        Suppression.objects.create(
            domain=domain, address=f"x{Suppression.objects.count()}@example.org", reason="bounce"
        )


def add_templates(domain, count: int) -> None:
    for _ in range(count):
        TemplateVersionFactory(template=TemplateFactory(domain=domain))


@pytest.mark.parametrize(
    ("url", "add"),
    [
        ("/admin/messaging/suppression/", add_suppressions),
        ("/admin/templates_app/template/", add_templates),
        ("/admin/templates_app/templateversion/", add_templates),
    ],
)
def test_the_list_costs_the_same_queries_for_2_or_20_rows(operator, django_assert_num_queries, url, add):
    add(DomainFactory(), 2)
    with CaptureQueriesContext(connection) as few:
        assert operator.get(url).status_code == 200
    add(DomainFactory(), 18)
    with django_assert_num_queries(len(few.captured_queries)):
        operator.get(url)

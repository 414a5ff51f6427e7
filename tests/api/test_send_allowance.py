import pytest
from django.utils import timezone

from domains.models import DailyUsage
from messaging.models import Message

SEND = {"from": "hello@acme.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("allowance", "sent_before", "status"), [(None, 0, 200), (3, 0, 200), (3, 2, 200), (3, 3, 429)]
)
def test_a_send_counts_against_the_daily_allowance(api, domain, allowance, sent_before, status):
    domain.daily_allowance = allowance
    domain.save()
    if sent_before:
        DailyUsage.objects.create(domain=domain, day=timezone.now().date(), sent_count=sent_before)

    response = api.post("/v1/send", SEND, format="json")

    assert response.status_code == status, response.json()
    counted = sent_before + (1 if status == 200 else 0)
    assert DailyUsage.objects.get(domain=domain, day=timezone.now().date()).sent_count == counted
    assert Message.objects.filter(domain=domain).count() == (1 if status == 200 else 0)
    if status == 429:
        assert response.json()["error"]["code"] == "AllowanceExhausted"
        assert int(response["Retry-After"]) > 0


@pytest.mark.django_db
def test_an_allowance_of_zero_refuses_the_days_first_send(api, domain):
    domain.daily_allowance = 0
    domain.save()

    response = api.post("/v1/send", SEND, format="json")

    assert response.status_code == 429
    assert not DailyUsage.objects.filter(domain=domain, sent_count__gt=0).exists()
    assert not Message.objects.filter(domain=domain).exists()

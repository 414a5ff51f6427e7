import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection
from django.utils import timezone

from domains.models import DailyUsage
from domains.services import sending_pause, sending_resume
from messaging.models import EventType, Message, MessageEvent
from tests.conftest import client_for
from tests.factories import ApiKeyFactory

# The allowance and pause checks are run on both paths: the one statement (PostgreSQL) and its ORM twin.
pytestmark = pytest.mark.usefixtures("sql_path")

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


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("sent_before", [None, 2], ids=["days-first-sends", "counter-row-exists"])
def test_concurrent_sends_never_overshoot_the_allowance(domain, sent_before):
    """Twelve sends at once against an allowance of five: exactly five are accepted, each stored
    with its event, and the counter reads five, whether or not the day's row existed."""
    domain.daily_allowance = 5
    domain.save()
    if sent_before is not None:
        DailyUsage.objects.create(domain=domain, day=timezone.now().date(), sent_count=sent_before)
    key, start = ApiKeyFactory(domain=domain), threading.Barrier(12)

    def send(_: int) -> int:
        try:
            start.wait()
            return client_for(key).post("/v1/send", SEND, format="json").status_code
        finally:
            connection.close()  # each thread has its own connection

    with ThreadPoolExecutor(12) as pool:
        statuses = sorted(pool.map(send, range(12)))

    accepted = 5 - (sent_before or 0)
    assert statuses == [200] * accepted + [429] * (12 - accepted)
    assert DailyUsage.objects.get(domain=domain, day=timezone.now().date()).sent_count == 5
    assert Message.objects.filter(domain=domain).count() == accepted
    assert MessageEvent.objects.filter(message__domain=domain, type=EventType.ACCEPTED).count() == accepted


@pytest.mark.django_db
def test_a_global_pause_takes_effect_on_the_next_send_and_counts_nothing(api, domain):
    assert api.post("/v1/send", SEND, format="json").status_code == 200

    sending_pause(domain=None, actor="test")
    paused = api.post("/v1/send", SEND, format="json")

    assert (paused.status_code, paused.json()["error"]["code"]) == (503, "SendingPaused")
    assert DailyUsage.objects.get(domain=domain, day=timezone.now().date()).sent_count == 1
    assert Message.objects.filter(domain=domain).count() == MessageEvent.objects.count() == 1

    sending_resume(domain=None)
    assert api.post("/v1/send", SEND, format="json").status_code == 200
    assert DailyUsage.objects.get(domain=domain, day=timezone.now().date()).sent_count == 2

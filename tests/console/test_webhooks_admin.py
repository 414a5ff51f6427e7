"""Webhook endpoints and deliveries in the console: the secret once, state, recent deliveries, re-send."""

import re

import pytest
from django.utils import timezone
from standardwebhooks import Webhook

from mailservice.encryption import decrypt_secret
from messaging.models import MessageEvent
from tests.factories import MessageFactory
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from webhooks.services import endpoint_create, events_fan_out

pytestmark = pytest.mark.django_db

LIST = "/admin/webhooks/webhookendpoint/"
DELIVERIES = "/admin/webhooks/webhookdelivery/"


def test_adding_an_endpoint_shows_its_secret_once(operator, domain):
    response = operator.post(
        f"{LIST}add/", {"domain": domain.pk, "url": "https://app.example.com/hooks", "event_types": ["email.bounced"]}
    )

    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    secret = re.search(r'value="(whsec_[^"]+)"', response.content.decode()).group(1)
    endpoint = WebhookEndpoint.objects.get()
    assert decrypt_secret(endpoint.secret_sealed) == secret and Webhook(secret)
    assert endpoint.event_types == ["email.bounced"]
    for url in (LIST, f"{LIST}{endpoint.pk}/change/"):
        assert secret not in operator.get(url).content.decode()


def test_a_private_url_is_refused_in_the_console(operator, domain, settings):
    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = False
    response = operator.post(f"{LIST}add/", {"domain": domain.pk, "url": "http://10.0.0.1/hooks"})

    assert b"private or loopback" in response.content and not WebhookEndpoint.objects.exists()


def test_the_endpoint_page_shows_its_state_and_recent_deliveries(operator, domain):
    endpoint = endpoint_create(domain=domain, url="https://app.example.com/hooks", event_types=[]).endpoint
    MessageEvent.objects.create(message=MessageFactory(domain=domain), type="accepted")
    events_fan_out()
    WebhookDelivery.objects.update(attempts=3, last_status_code=502, last_latency_ms=120, last_error="HTTP 502")
    WebhookEndpoint.objects.update(enabled=False, disabled_reason="every delivery failed for 5 days (HTTP 502)")

    page = operator.get(f"{LIST}{endpoint.pk}/change/").content.decode()
    assert "DISABLED: every delivery failed for 5 days" in page
    assert "email.accepted" in page and "502" in page and "120 ms" in page
    assert "DISABLED" in operator.get(LIST).content.decode()


def test_failed_deliveries_of_a_period_can_be_sent_again(operator, domain):
    endpoint_create(domain=domain, url="https://app.example.com/hooks", event_types=[])
    for _ in range(3):
        MessageEvent.objects.create(message=MessageFactory(domain=domain), type="accepted")
    events_fan_out()
    WebhookDelivery.objects.update(status=DeliveryStatus.FAILED, attempts=8, next_attempt_at=timezone.now())
    failed = list(WebhookDelivery.objects.values_list("pk", flat=True))

    response = operator.post(
        f"{DELIVERIES}?status=failed", {"action": "resend", "_selected_action": failed[:2]}, follow=True
    )

    assert response.status_code == 200
    assert WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, attempts=0).count() == 2
    assert "email.accepted" in operator.get(f"{DELIVERIES}?status=pending").content.decode()


def test_the_endpoint_page_lists_failed_deliveries_and_replays_one_with_a_click(operator, support, domain):
    endpoint = endpoint_create(domain=domain, url="https://app.example.com/hooks", event_types=[]).endpoint
    for _ in range(2):
        MessageEvent.objects.create(message=MessageFactory(domain=domain), type="accepted")
    events_fan_out()
    failed, succeeded = WebhookDelivery.objects.order_by("id")
    WebhookDelivery.objects.filter(pk=failed.pk).update(status=DeliveryStatus.FAILED, attempts=8, last_error="HTTP 502")
    WebhookDelivery.objects.filter(pk=succeeded.pk).update(status=DeliveryStatus.SUCCEEDED, attempts=1)
    replay = f"{LIST}{endpoint.pk}/replay/{failed.pk}/"

    page = operator.get(f"{LIST}{endpoint.pk}/change/").content.decode()
    assert f'formaction="{replay}"' in page and page.count('name="replay"') == 1
    assert operator.get(replay).status_code == 405
    assert support.post(replay).status_code == 403

    response = operator.post(replay)

    assert response.status_code == 302 and response["Location"] == f"{LIST}{endpoint.pk}/change/"
    failed.refresh_from_db()
    assert (failed.status, failed.attempts, failed.event_id) == (DeliveryStatus.PENDING, 0, failed.event_id)
    assert "is queued again" in operator.get(response["Location"]).content.decode()
    other = endpoint_create(domain=domain, url="https://other.example.com/hooks", event_types=[]).endpoint
    operator.post(f"{LIST}{other.pk}/replay/{succeeded.pk}/")  # another endpoint's delivery: nothing happens
    assert WebhookDelivery.objects.get(pk=succeeded.pk).status == DeliveryStatus.SUCCEEDED

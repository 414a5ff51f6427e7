"""Fan-out and delivery in-process (the live tests run them in real workers): signing, retries,
rotation, the concurrency cap, refused targets, disabling."""

from datetime import timedelta

import pytest
from django.utils import timezone
from standardwebhooks import Webhook

from messaging.models import EventType as MessageEventType
from messaging.models import MessageEvent, Status
from tests.factories import DomainFactory, MessageFactory
from webhooks import services
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint
from webhooks.tasks import pump_task

pytestmark = pytest.mark.django_db


def _event(message=None, type_=MessageEventType.DELIVERED, **fields) -> MessageEvent:
    return MessageEvent.objects.create(message=message or MessageFactory(), type=type_, **fields)


def test_fan_out_makes_one_delivery_per_interested_endpoint_and_empties_the_outbox(domain):
    everything = services.endpoint_create(domain=domain, url="http://127.0.0.1:9/a", event_types=[]).endpoint
    bounces = services.endpoint_create(
        domain=domain, url="http://127.0.0.1:9/b", event_types=["email.bounced"]
    ).endpoint
    services.endpoint_create(domain=DomainFactory(), url="http://127.0.0.1:9/c", event_types=[])
    message = MessageFactory(domain=domain)
    delivered, bounced = _event(message), _event(message, MessageEventType.BOUNCED, detail="550 5.1.1 no such user")

    assert services.events_fan_out() == 2

    rows = {(d.endpoint_id, d.message_event_id) for d in WebhookDelivery.objects.all()}
    assert rows == {(everything.pk, delivered.pk), (everything.pk, bounced.pk), (bounces.pk, bounced.pk)}
    assert not MessageEvent.objects.filter(published_at__isnull=True).exists()
    assert services.events_fan_out() == 0
    # One event id per event, whichever endpoint gets it.
    assert WebhookDelivery.objects.filter(message_event=bounced).values("event_id").distinct().count() == 1


def test_a_delivery_is_signed_per_standard_webhooks_and_carries_the_message(domain, receiver):
    created = services.endpoint_create(domain=domain, url=receiver.url, event_types=[])
    # Its only recipient bounced: the inbound path has made it `bounced` before the event is fanned out.
    message = MessageFactory(domain=domain, to=["bob@example.org"], status=Status.BOUNCED)
    _event(
        message,
        MessageEventType.BOUNCED,
        recipient="bob@example.org",
        detail="smtp; 550 user unknown",
        enhanced_status="5.1.1",
        diagnostic="smtp; 550 user unknown",
        bounce_type="hard",
    )

    pump_task()

    [event] = receiver.verified(created.secret)
    assert event["type"] == "email.bounced" and event["id"].startswith("evt_") and event["test"] is False
    assert event["data"] | {"created_at": None} == {
        "id": message.public_id,
        "domain_id": domain.public_id,
        "direction": "sent",
        "from": message.from_address,
        "to": ["bob@example.org"],
        "subject": message.subject,
        "status": "bounced",
        "created_at": None,
        "text": None,
        "recipient": "bob@example.org",
        "status_code": "5.1.1",
        "diagnostic": "smtp; 550 user unknown",
        "bounce_type": "hard",
    }
    assert receiver.requests[0].headers["webhook-id"] == event["id"]
    delivery = WebhookDelivery.objects.get()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == (DeliveryStatus.SUCCEEDED, 1, 200)


@pytest.mark.parametrize(
    ("type_", "recorded", "fields"),
    [
        (
            MessageEventType.DELIVERED,
            {"detail": "250 2.0.0 OK: queued", "smtp_code": 250, "enhanced_status": "2.0.0"}
            | {"diagnostic": "2.0.0 OK: queued"},
            {"smtp_response": "250 2.0.0 OK: queued", "status_code": "2.0.0"},
        ),
        (
            MessageEventType.BOUNCED,
            {"detail": "550 no such user", "smtp_code": 550, "diagnostic": "no such user", "bounce_type": "hard"},
            {"smtp_response": "550 no such user", "bounce_type": "hard"},
        ),
        (
            MessageEventType.BOUNCED,
            {"enhanced_status": "4.2.2", "diagnostic": "smtp; 452 mailbox full", "bounce_type": "soft"},
            {"status_code": "4.2.2", "diagnostic": "smtp; 452 mailbox full", "bounce_type": "soft"},
        ),
        (
            MessageEventType.DEFERRED,
            {"detail": "attempt 1: 451 try later", "smtp_code": 451, "diagnostic": "try later"},
            {"diagnostic": "attempt 1: 451 try later"},
        ),
        (
            MessageEventType.BOUNCED,
            {"detail": "550 5.7.26 DMARC (reason: authentication — fix the dmarc check: …)", "smtp_code": 550}
            | {"diagnostic": "5.7.26 DMARC", "cause": "authentication", "fix_check": "dmarc", "bounce_type": "hard"}
            | {"reason": "authentication"},
            {"smtp_response": "550 5.7.26 DMARC", "bounce_type": "hard", "cause": "authentication"}
            | {"fix_check": "dmarc", "reason": "authentication"},
        ),
        (
            MessageEventType.FAILED,
            {"detail": "attempt 5, giving up: 421 4.7.28 rate limited (reason: rate_limited)", "smtp_code": 421}
            | {"cause": "rate_limited", "reason": "rate_limited"},
            {"diagnostic": "attempt 5, giving up: 421 4.7.28 rate limited (reason: rate_limited)"}
            | {"cause": "rate_limited", "reason": "rate_limited"},
        ),
        (MessageEventType.COMPLAINED, {"detail": "abuse", "feedback_type": "abuse"}, {"feedback_type": "abuse"}),
        (
            MessageEventType.COMPLAINED,
            {"detail": "feedback-type: Fraud", "feedback_type": "fraud"},
            {"feedback_type": "fraud"},
        ),
        (MessageEventType.SUPPRESSED, {"detail": "on the list"}, {"diagnostic": "on the list"}),
        (MessageEventType.ACCEPTED, {}, {}),
    ],
)
def test_event_fields_come_from_what_the_event_recorded(type_, recorded, fields):
    from webhooks.payloads import event_fields

    assert event_fields(MessageEvent(type=type_, **recorded)) == fields


def test_a_failed_delivery_is_retried_within_ten_seconds_then_succeeds(domain, receiver):
    services.endpoint_create(domain=domain, url=receiver.url, event_types=[])
    _event(MessageFactory(domain=domain))
    receiver.behaviour.statuses = [500]

    pump_task()
    delivery = WebhookDelivery.objects.get()
    assert delivery.status == DeliveryStatus.PENDING and delivery.last_status_code == 500
    assert delivery.next_attempt_at - timezone.now() < timedelta(seconds=10)
    assert delivery.endpoint.failing_since is not None

    WebhookDelivery.objects.update(next_attempt_at=timezone.now())
    pump_task()
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == (DeliveryStatus.SUCCEEDED, 2)
    assert WebhookEndpoint.objects.get().failing_since is None
    assert [r.headers["webhook-id"] for r in receiver.requests] == [delivery.event_id] * 2


def test_the_retry_schedule_spans_about_a_day_then_gives_up():
    delays = [services.retry_delay(attempt=n) for n in range(1, 9)]
    assert delays[0] < timedelta(seconds=10) and delays[-1] is None
    total = sum(delays[:-1], timedelta())
    assert timedelta(hours=22) <= total <= timedelta(hours=34)  # about a day: 27.6 h before jitter


def test_an_endpoint_failing_for_five_days_is_disabled_and_says_why(domain, receiver):
    endpoint = services.endpoint_create(domain=domain, url=receiver.url, event_types=[]).endpoint
    WebhookEndpoint.objects.update(failing_since=timezone.now() - timedelta(days=5, minutes=1))
    _event(MessageFactory(domain=domain))
    receiver.behaviour.statuses = [503]

    pump_task()

    endpoint.refresh_from_db()
    assert not endpoint.enabled and "5 days" in endpoint.disabled_reason and "HTTP 503" in endpoint.disabled_reason
    _event(MessageFactory(domain=domain))
    pump_task()
    assert len(receiver.requests) == 1  # nothing more goes to a disabled endpoint


def test_rotation_signs_with_both_secrets_for_a_day(domain, receiver):
    created = services.endpoint_create(domain=domain, url=receiver.url, event_types=[])
    new_secret = services.endpoint_rotate_secret(endpoint=created.endpoint)
    _event(MessageFactory(domain=domain))

    pump_task()

    assert len(receiver.requests[0].headers["webhook-signature"].split(" ")) == 2
    assert receiver.verified(created.secret) == receiver.verified(new_secret)

    WebhookEndpoint.objects.update(previous_secret_expires_at=timezone.now())
    _event(MessageFactory(domain=domain))
    pump_task()
    assert len(receiver.requests[1].headers["webhook-signature"].split(" ")) == 1


def test_no_more_than_the_cap_of_deliveries_is_in_flight_per_endpoint(domain, settings):
    settings.MAILSERVICE_WEBHOOK_ENDPOINT_CONCURRENCY = 3
    endpoint = services.endpoint_create(domain=domain, url="http://127.0.0.1:9/", event_types=[]).endpoint
    other = services.endpoint_create(domain=domain, url="http://127.0.0.1:9/other", event_types=[]).endpoint
    for _ in range(5):
        _event(MessageFactory(domain=domain))
    services.events_fan_out()

    assert sorted(services.endpoints_due()) == sorted([endpoint.pk, other.pk])  # once each, 5 due apiece
    assert len(services.deliveries_claim(endpoint_id=endpoint.pk, limit=10)) == 3
    assert services.deliveries_claim(endpoint_id=endpoint.pk, limit=10) == []
    assert len(services.deliveries_claim(endpoint_id=other.pk, limit=10)) == 3


@pytest.mark.parametrize(
    "url", ["ftp://example.com/x", "http:///nohost", "http://127.0.0.1/x", "http://[::1]/x", "http://10.1.2.3/"]
)
def test_only_public_http_urls_are_accepted_unless_private_targets_are_allowed(domain, settings, url):
    from mailservice.errors import ValidationFailed

    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = False
    with pytest.raises(ValidationFailed):
        services.endpoint_create(domain=domain, url=url, event_types=[])


def test_a_name_that_resolves_to_loopback_is_refused_at_send_time(domain, settings, receiver):
    services.endpoint_create(domain=domain, url=receiver.url.replace("127.0.0.1", "localhost"), event_types=[])
    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = False
    _event(MessageFactory(domain=domain))

    pump_task()

    delivery = WebhookDelivery.objects.get()
    assert receiver.requests == [] and delivery.last_error.startswith("refused: localhost resolves to a private")


def test_the_secret_is_stored_encrypted(domain):
    created = services.endpoint_create(domain=domain, url="https://hooks.example.com/x", event_types=[])
    assert created.secret.startswith("whsec_") and Webhook(created.secret)
    assert created.secret not in created.endpoint.secret_sealed

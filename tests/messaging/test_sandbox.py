"""Test keys: the same checks as live keys, no SMTP, no allowance, simulated outcomes, separate reads."""

import io

import pytest
from django.core.management import call_command

from apikeys.models import ApiKey
from domains.models import DailyUsage, Domain
from messaging.models import EventType, Message, Status
from tests.api.wire import assert_api_error, inline_body
from tests.conftest import client_for
from tests.factories import ApiKeyFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def outbox(settings, tmp_path):
    settings.MAILSERVICE_OUTBOX_DIR = tmp_path
    return tmp_path


@pytest.fixture
def test_api(domain):
    key = ApiKeyFactory(domain=domain)
    ApiKey.objects.filter(pk=key.pk).update(is_test=True)
    return client_for(key)


@pytest.mark.parametrize(
    ("recipient", "status", "events"),
    [
        ("delivered@simulator.test", Status.DELIVERED, [EventType.ACCEPTED, EventType.DELIVERED]),
        ("someone@example.org", Status.DELIVERED, [EventType.ACCEPTED, EventType.DELIVERED]),
        ("bounced@simulator.test", Status.BOUNCED, [EventType.ACCEPTED, EventType.BOUNCED]),
        ("softbounce@simulator.test", Status.FAILED, [EventType.ACCEPTED, EventType.SOFT_BOUNCED]),
        (
            "complained@simulator.test",
            Status.COMPLAINED,
            [EventType.ACCEPTED, EventType.DELIVERED, EventType.COMPLAINED],
        ),
    ],
)
def test_a_test_send_ends_as_its_recipient_says_and_never_reaches_the_relay(
    test_api, outbox, recipient, status, events, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = test_api.post("/v1/send", inline_body(to=recipient), format="json")
    assert response.status_code == 200
    message = Message.objects.get(public_id=response.json()["id"])
    assert message.is_test and message.status == status
    assert list(message.events.values_list("type", flat=True)) == events
    assert list(outbox.iterdir()) == []
    assert not DailyUsage.objects.filter(sent_count__gt=0).exists()


def test_a_test_send_gets_the_same_errors_as_a_live_one(test_api, domain):
    assert_api_error(
        test_api.post("/v1/send", inline_body(**{"from": "x@elsewhere.example"}), format="json"),
        403,
        "SenderNotAllowed",
    )
    Domain.objects.filter(pk=domain.pk).update(verified=False)
    assert_api_error(test_api.post("/v1/send", inline_body(), format="json"), 400, "DomainNotVerified")
    Domain.objects.filter(pk=domain.pk).update(verified=True, sending_paused=True)
    assert_api_error(test_api.post("/v1/send", inline_body(), format="json"), 503, "SendingPaused")


def test_test_and_live_messages_never_see_each_other(api, test_api, outbox):
    live = api.post("/v1/send", inline_body(), format="json").json()["id"]
    test = test_api.post("/v1/send", inline_body(), format="json").json()["id"]

    assert [m["id"] for m in api.get("/v1/messages").json()["data"]] == [live]
    assert [m["id"] for m in test_api.get("/v1/messages").json()["data"]] == [test]
    assert_api_error(api.get(f"/v1/messages/{test}"), 404, "NotFound")
    assert_api_error(test_api.get(f"/v1/messages/{live}"), 404, "NotFound")


def test_create_api_key_makes_a_test_key_with_test(domain):
    out = io.StringIO()
    call_command("create_api_key", domain.name, "--permission", "email.send", "--test", stdout=out)
    secret = out.getvalue().splitlines()[-1]
    assert ApiKey.objects.get(prefix=secret.split("_")[1]).is_test

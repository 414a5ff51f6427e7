import pytest

from messaging.models import EventType, Message, Status


@pytest.mark.django_db
def test_inline_send_stores_an_accepted_message(api, domain):
    response = api.post(
        "/v1/send",
        {"from": "Acme <hello@acme.example.com>", "to": "bob@example.org", "subject": "Hi", "text": "Hello"},
        format="json",
    )

    assert response.status_code == 200
    assert set(response.json()) == {"id", "created_at"}
    message = Message.objects.get(public_id=response.json()["id"])
    assert (message.domain, message.status, message.to, message.text) == (
        domain,
        Status.ACCEPTED,
        ["bob@example.org"],
        "Hello",
    )
    assert list(message.events.values_list("type", flat=True)) == [EventType.ACCEPTED]

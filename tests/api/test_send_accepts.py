import pytest

from domains.services import domain_create
from messaging.models import EventType, Message, Status
from tests.conftest import client_for
from tests.factories import ApiKeyFactory

# The accept path is run on both paths: the one statement (PostgreSQL) and its ORM twin.
pytestmark = pytest.mark.usefixtures("sql_path")


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


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("sender", "status"),
    [("x@Bücher.example", 200), ("x@xn--bcher-kva.example", 200), ("x@bücher.example.", 400)],
)
def test_a_unicode_sender_domain_matches_its_idna_form_exactly(sender, status):
    domain = domain_create(name="bücher.example", verified=True)
    api = client_for(ApiKeyFactory(domain=domain))

    response = api.post(
        "/v1/send", {"from": sender, "to": "b@example.org", "subject": "Hi", "text": "x"}, format="json"
    )

    assert (domain.name, response.status_code) == ("xn--bcher-kva.example", status)

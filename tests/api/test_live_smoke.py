import httpx
import pytest

from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_a_real_server_accepts_a_send_and_lists_it():
    key = ApiKeyFactory(domain=DomainFactory(name="live.example.com"))
    with web_server() as base_url:
        headers = {"Authorization": f"Bearer {key.secret}"}
        sent = httpx.post(
            f"{base_url}/v1/send",
            headers=headers,
            json={"from": "a@live.example.com", "to": "b@example.org", "subject": "Hi", "text": "Hello"},
        )
        listed = httpx.get(f"{base_url}/v1/messages", headers=headers)

    assert sent.status_code == 200, sent.text
    assert [item["id"] for item in listed.json()["data"]] == [sent.json()["id"]]

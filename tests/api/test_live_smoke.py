import httpx
import pytest

from tests.factories import ApiKeyFactory, DomainFactory

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def test_a_real_server_accepts_a_send_and_lists_it(live_web):
    key = ApiKeyFactory(domain=DomainFactory(name="live.example.com"))
    headers = {"Authorization": f"Bearer {key.secret}"}
    sent = httpx.post(
        f"{live_web}/v1/send",
        headers=headers,
        json={"from": "a@live.example.com", "to": "b@example.org", "subject": "Hi", "text": "Hello"},
    )
    listed = httpx.get(f"{live_web}/v1/messages", headers=headers)

    assert sent.status_code == 200, sent.text
    assert [item["id"] for item in listed.json()["data"]] == [sent.json()["id"]]

"""Characters PostgreSQL cannot store (NUL) or UTF-8 cannot encode (a lone surrogate) are a 400 in
any address field, as in every other string field, never a 500 from the database."""

import json

import pytest

from messaging.models import Message

BODY = {"from": "Acme <hello@acme.example.com>", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}


@pytest.mark.django_db
@pytest.mark.parametrize("character", ["\x00", "\ud800"], ids=["nul", "lone-surrogate"])
@pytest.mark.parametrize(
    "field, mailbox",
    [
        ("from", "Acme{} <hello@acme.example.com>"),
        ("to", "Bob{} <bob@example.org>"),
        ("cc", ["Carol{} <carol@example.org>"]),
        ("replyTo", "Help{} <help@acme.example.com>"),
    ],
)
def test_an_unstorable_character_in_an_address_is_refused(api, field, mailbox, character):
    value = [item.format(character) for item in mailbox] if isinstance(mailbox, list) else mailbox.format(character)

    response = api.post("/v1/send", data=json.dumps(BODY | {field: value}), content_type="application/json")

    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "ValidationError"
    assert field in response.json()["error"]["message"]
    assert not Message.objects.exists()

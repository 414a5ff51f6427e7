import pytest

from messaging.models import Message

SEND = '{"from": "hello@acme.example.com", "to": "bob@example.org", "subject": %s, "text": %s}'


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("subject", "text"),
    [('"Hi"', '"a\\ud800b"'), ('"a\\udfffb"', '"Hello"'), ('"Hi"', '"\\ud83d"')],
    ids=["lone high surrogate in text", "lone low surrogate in subject", "half an emoji pair"],
)
def test_a_lone_surrogate_is_refused_by_name(api, subject, text):
    response = api.post("/v1/send", SEND % (subject, text), content_type="application/json")

    assert response.status_code == 400
    assert "Surrogate characters are not allowed: U+D" in response.content.decode()
    assert not Message.objects.exists()


@pytest.mark.django_db
def test_a_whole_surrogate_pair_is_an_ordinary_character(api):
    response = api.post("/v1/send", SEND % ('"Hi"', '"\\ud83d\\ude00"'), content_type="application/json")

    assert response.status_code == 200
    assert Message.objects.get().text == "\U0001f600"


@pytest.mark.django_db
@pytest.mark.parametrize(("length", "status"), [(100_000, 200), (100_001, 400)])
def test_text_is_limited_to_100_000_characters(api, length, status):
    response = api.post("/v1/send", SEND % ('"Hi"', f'"{"x" * length}"'), content_type="application/json")

    assert response.status_code == status

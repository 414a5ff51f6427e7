"""Every /v1/ endpoint refuses a query parameter it does not take, or one given twice, with a 400 (issue 41,
item 6): `POST /v1/send?pool=x` sends nothing, and a signed link with a second `token` is not opened,
whichever of the two is valid. A request without a key is still a 401 first."""

from urllib.parse import parse_qs, urlsplit

import pytest

from messaging.models import Direction, Message, Status
from tests.api.wire import assert_api_error, inline_body
from tests.conftest import client_for
from tests.factories import MessageFactory
from webhooks.links import link_sign

pytestmark = pytest.mark.django_db


@pytest.fixture
def received(domain) -> Message:
    return MessageFactory(
        domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED, raw=b"Subject: hi\r\n\r\nhi\r\n"
    )


def call(client, method: str, path: str):
    if method == "POST":
        body = {"messages": [inline_body()]} if path.startswith("/v1/send/batch") else inline_body()
        return client.post(path, body, format="json")
    return client.get(path)


ENDPOINTS = [
    ("POST", "/v1/send"),
    ("POST", "/v1/send/batch"),
    ("GET", "/v1/messages"),
    ("GET", "/v1/messages/{id}"),
    ("GET", "/v1/messages/{id}/raw"),
    ("GET", "/v1/messages/{id}/attachments/0"),
    ("GET", "/v1/openapi.json"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
def test_an_unknown_query_parameter_is_a_400_naming_it_on_every_endpoint(api, received, method, path):
    response = call(api, method, path.format(id=received.public_id) + "?pool=x")

    error = assert_api_error(response, 400, "ValidationError")
    assert error["message"] == "pool: unknown query parameter"
    assert Message.objects.count() == 1  # nothing sent


@pytest.mark.parametrize(("method", "path"), ENDPOINTS[:-1])
def test_without_a_key_the_answer_is_401_whatever_the_query(received, method, path):
    assert_api_error(
        call(client_for(None), method, path.format(id=received.public_id) + "?pool=x"), 401, "Unauthorized"
    )


def test_a_send_with_a_known_body_and_an_unknown_parameter_sends_nothing(api):
    assert_api_error(api.post("/v1/send?pool=x", inline_body(), format="json"), 400, "ValidationError")
    assert not Message.objects.exists()


@pytest.mark.parametrize("valid_first", [True, False], ids=["valid token first", "valid token last"])
def test_a_signed_link_with_a_repeated_token_is_refused(api, received, valid_first):
    path = f"/v1/messages/{received.public_id}/raw"
    token = parse_qs(urlsplit(link_sign(path)).query)["token"][0]
    assert api.get(path, {"token": token}).status_code == 200
    tokens = [token, "x"] if valid_first else ["x", token]

    error = assert_api_error(api.get(f"{path}?token={tokens[0]}&token={tokens[1]}"), 400, "ValidationError")

    assert error["message"] == "token: may be given only once"

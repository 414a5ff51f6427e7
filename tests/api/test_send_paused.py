"""A 503 SendingPaused says which pause holds the send and why, and still that nothing was sent."""

import json

import pytest

from domains.services import sending_pause
from messaging.models import Message
from messaging.safeguards import SAFEGUARD_ACTOR
from tests.api.wire import assert_api_error, inline_body

pytestmark = pytest.mark.django_db

NOT_SENT = "production sending is not activated for this domain; no message was sent"
AUTO_REASON = "Automatic pause: bounce rate 7.5% (15 of the last 200 sends) is over the 5% limit"


@pytest.mark.parametrize(
    ("pause", "expected"),
    [
        ("global", f"Sending is paused globally by an operator (incident 42): {NOT_SENT}"),
        ("operator", f"Sending is paused for this domain by an operator (incident 42): {NOT_SENT}"),
        (
            "automatic",
            "Sending is paused for this domain automatically (bounce rate 7.5% (15 of the last 200 sends) is over "
            f"the 5% limit): {NOT_SENT}",
        ),
    ],
)
def test_the_message_names_the_pause(api, domain, pause, expected):
    if pause == "global":
        sending_pause(domain=None, actor="ops", reason="incident 42")
    elif pause == "operator":
        sending_pause(domain=domain, actor="ops", reason="incident 42")
    else:
        sending_pause(domain=domain, actor=SAFEGUARD_ACTOR, reason=AUTO_REASON, automatic=True)

    response = api.post("/v1/send", data=json.dumps(inline_body()), content_type="application/json")

    error = assert_api_error(response, 503, "SendingPaused")
    assert error["message"] == expected
    assert not Message.objects.exists()


def test_an_operators_reason_is_one_line_of_at_most_200_characters(api, domain):
    sending_pause(domain=domain, actor="ops", reason="tutorial\r\nX-Injected: yes " + "x" * 300)

    response = api.post("/v1/send", data=json.dumps(inline_body()), content_type="application/json")

    message = assert_api_error(response, 503, "SendingPaused")["message"]
    reason = message.removeprefix("Sending is paused for this domain by an operator (").partition("): ")[0]
    assert reason.startswith("tutorial X-Injected: yes xxx") and len(reason) == 200 and "\n" not in message
    assert message.endswith(f"): {NOT_SENT}")

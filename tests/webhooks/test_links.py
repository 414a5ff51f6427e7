"""The signed links of `email.received` (raw source, attachments): a token is good for
MAILSERVICE_WEBHOOK_LINK_MAX_AGE from when it was made, and one dated ahead of the clock is refused."""

import time
from urllib.parse import parse_qs, urlsplit

import pytest
from django.core import signing

from mailservice.errors import ApiError
from webhooks.links import link_check, link_sign

PATH = "/v1/messages/msg_abc/raw"


def token_made(monkeypatch: pytest.MonkeyPatch, *, seconds_from_now: int) -> str:
    made_at = int(time.time()) + seconds_from_now
    with monkeypatch.context() as patched:
        patched.setattr(signing.TimestampSigner, "timestamp", lambda self: signing.b62_encode(made_at))
        link = link_sign(PATH)
    return parse_qs(urlsplit(link).query)["token"][0]


@pytest.mark.parametrize("seconds_from_now", [0, -3600, 30])
def test_a_token_made_within_its_lifetime_opens_the_link(monkeypatch, seconds_from_now):
    link_check(path=PATH, token=token_made(monkeypatch, seconds_from_now=seconds_from_now))


@pytest.mark.parametrize(
    ("seconds_from_now", "complaint"),
    [(120, "dated in the future"), (10**9, "dated in the future"), (-8 * 24 * 3600, "expired")],
    ids=["2 minutes ahead", "years ahead", "8 days old"],
)
def test_a_token_dated_ahead_or_expired_is_refused(monkeypatch, seconds_from_now, complaint):
    token = token_made(monkeypatch, seconds_from_now=seconds_from_now)

    with pytest.raises(ApiError, match=complaint) as refused:
        link_check(path=PATH, token=token)
    assert refused.value.status == 403


def test_a_token_for_another_path_is_refused(monkeypatch):
    with pytest.raises(ApiError, match="invalid link token"):
        link_check(path="/v1/messages/msg_other/raw", token=token_made(monkeypatch, seconds_from_now=0))

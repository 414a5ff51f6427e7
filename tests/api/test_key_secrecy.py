"""Keys never leak into logs or error bodies, and every failed lookup costs the same digest and compare."""

import logging

import pytest

from apikeys import services
from apikeys.services import apikey_revoke
from tests.api.wire import assert_api_error
from tests.conftest import client_for
from tests.factories import ApiKeyFactory

pytestmark = pytest.mark.django_db


def test_no_key_or_digest_reaches_logs_or_error_bodies(caplog, full_key, domain, settings):
    settings.DEBUG = True  # the most talkative configuration, including SQL logging
    revoked = ApiKeyFactory(domain=domain)
    apikey_revoke(api_key=revoked)
    wrong_secret = full_key.secret[:-1] + ("a" if full_key.secret[-1] != "a" else "b")
    presented = [wrong_secret, revoked.secret, "ms_nosuchprefix_" + "x" * 40, full_key.secret]

    with caplog.at_level(logging.DEBUG):
        bodies = [
            client_for(None).get("/v1/messages", HTTP_AUTHORIZATION=f"Bearer {secret}").content.decode()
            for secret in presented
        ]
        bodies.append(client_for(full_key).post("/v1/send", {"from": 5}, format="json").content.decode())

    logged = caplog.text + " ".join(str(record.args) for record in caplog.records)
    for secret, digest in [(full_key.secret, full_key.secret_hash), (revoked.secret, revoked.secret_hash)]:
        for text in [logged, *bodies]:
            assert secret not in text and digest not in text
    assert wrong_secret not in logged and all(wrong_secret not in body for body in bodies)


@pytest.fixture
def spies(monkeypatch):
    """Count the real digest and compare calls of apikey_authenticate (they still do their work)."""
    calls: dict[str, list] = {"digest": [], "compare": []}
    real_digest, real_compare = services.key_digest, services.hmac.compare_digest

    def digest(raw_key: str) -> str:
        calls["digest"].append(raw_key)
        return real_digest(raw_key)

    def compare(a, b) -> bool:
        calls["compare"].append((len(a), len(b)))
        return real_compare(a, b)

    monkeypatch.setattr(services, "key_digest", digest)
    monkeypatch.setattr(services.hmac, "compare_digest", compare)
    return calls


def test_unknown_prefix_and_wrong_secret_take_the_same_path(spies, full_key, domain):
    revoked = ApiKeyFactory(domain=domain)
    apikey_revoke(api_key=revoked)
    presented = {
        "valid": full_key.secret,
        "wrong secret": full_key.secret[:-1] + ("a" if full_key.secret[-1] != "a" else "b"),
        "unknown prefix": "ms_nosuchprefix_" + full_key.secret[16:],
        "revoked": revoked.secret,
        "not a key": "hello",
        "odd prefix": "ms_\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00_secret",
    }
    for label, raw_key in presented.items():
        spies["digest"].clear()
        spies["compare"].clear()
        authenticated = services.apikey_authenticate(raw_key=raw_key)
        assert (authenticated is not None) is (label == "valid"), label
        assert spies["digest"] == [raw_key], label
        assert spies["compare"] == [(64, 64)], label


def test_a_nul_in_the_presented_key_is_a_401(full_key):
    response = client_for(None).get("/v1/messages", HTTP_AUTHORIZATION="Bearer ms_\x00" + "a" * 50)
    assert_api_error(response, 401, "Unauthorized")

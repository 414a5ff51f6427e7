"""The submission server bounds what one client can hold or try: at most
MAILSERVICE_SUBMISSION_MAX_CONNECTIONS_PER_IP open sessions per address (then 421 and close), and
failed AUTH throttled per address and per API key, across addresses and server processes (the
counters are in Redis). Real run_submission_smtp processes; clients on several loopback addresses."""

from collections.abc import Iterator

import pytest

from apikeys.models import KEY_PREFIX_LENGTH
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import submission_smtp_server, wait_until
from tests.submission.raw_smtp import RawSession

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

ENV = {"MAILSERVICE_SUBMISSION_ALLOW_PLAINTEXT_AUTH": "true"}
MAX_SESSIONS = 20  # the defaults under test
FAILURES_PER_IP = 10
FAILURES_PER_KEY = 20


@pytest.fixture(scope="module")
def port(django_db_setup, django_db_blocker) -> Iterator[int]:
    with django_db_blocker.unblock(), submission_smtp_server(**ENV) as port:
        yield port


@pytest.fixture
def key():
    return ApiKeyFactory(domain=DomainFactory(name="app.example.com"))


def auth_reply(port: int, secret: str, *, source: str) -> bytes:
    session = RawSession(port, source=source)
    try:
        return session.auth_plain(secret)[:9]
    finally:
        session.close()


def test_the_21st_session_from_one_address_gets_421_and_is_closed(port):
    held = [RawSession(port, source="127.0.0.2") for _ in range(MAX_SESSIONS)]
    try:
        assert {session.greeting[:3] for session in held} == {b"220"}
        refused = RawSession(port, source="127.0.0.2")
        assert refused.greeting.startswith(b"421 4.7.0")
        assert refused.replies.read() == b""  # closed by the server
        refused.close()
        other = RawSession(port, source="127.0.0.3")
        assert other.greeting.startswith(b"220")
        other.close()

        held.pop().close()  # a closed session gives its slot back
        wait_until(
            lambda: RawSession(port, source="127.0.0.2").greeting.startswith(b"220"), timeout=10, message="a slot"
        )
    finally:
        for session in held:
            session.close()


def test_auth_guessing_from_one_address_is_refused_even_with_the_right_key(port, key):
    wrong = [auth_reply(port, f"ms_guess{n:04d}_wrong", source="127.0.0.4") for n in range(FAILURES_PER_IP)]

    assert set(wrong) == {b"535 5.7.8"}
    assert auth_reply(port, key.secret, source="127.0.0.4") == b"454 4.7.0"
    assert auth_reply(port, key.secret, source="127.0.0.5") == b"235 2.7.0"


def test_guessing_one_keys_secret_from_many_addresses_locks_that_key_only(port, key):
    other_key = ApiKeyFactory(domain=key.domain)
    prefix = key.secret[: len("ms_") + KEY_PREFIX_LENGTH]
    sources = [f"127.0.1.{n}" for n in range(1, 5)]
    per_source = FAILURES_PER_KEY // len(sources)  # each address stays under its own limit
    wrong = [auth_reply(port, f"{prefix}_wrong{n}", source=source) for source in sources for n in range(per_source)]

    assert set(wrong) == {b"535 5.7.8"}
    assert auth_reply(port, key.secret, source="127.0.1.9") == b"454 4.7.0"
    assert auth_reply(port, other_key.secret, source="127.0.1.9") == b"235 2.7.0"


def test_the_failure_counters_are_shared_by_server_processes(port, key):
    with submission_smtp_server(**ENV) as second:
        for n in range(FAILURES_PER_IP):
            assert auth_reply(port if n % 2 else second, f"ms_guess{n:04d}_wrong", source="127.0.0.6") == b"535 5.7.8"

        assert auth_reply(second, key.secret, source="127.0.0.6") == b"454 4.7.0"
        assert auth_reply(port, key.secret, source="127.0.0.6") == b"454 4.7.0"

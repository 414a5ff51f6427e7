"""The webhooks scenario's receiver counts only correctly signed deliveries, and each webhook-id once per endpoint."""

from datetime import UTC, datetime

from bench.receiver import Receiver
from webhooks.secrets import secret_generate
from webhooks.signing import signature_headers

BODY = '{"type": "email.delivered"}'


def _signed(secret: str, event_id: str = "evt_1") -> dict[str, str]:
    return signature_headers(event_id=event_id, timestamp=datetime.now(UTC), body=BODY, secrets=[secret])


def test_counts_valid_invalid_and_repeated_deliveries():
    first, second = secret_generate(), secret_generate()
    receiver = Receiver()
    receiver.configure([first, second])

    receiver.deliver("/hook/0", _signed(first), BODY.encode())
    receiver.deliver("/hook/1", _signed(second), BODY.encode())  # the same id on another endpoint: not a repeat
    receiver.deliver("/hook/0", _signed(first), BODY.encode())  # sent twice
    receiver.deliver("/hook/1", _signed(first, "evt_2"), BODY.encode())  # another endpoint's secret
    receiver.deliver("/hook/0", _signed(first), b'{"type": "tampered"}')
    receiver.deliver("/hook/7", _signed(first), BODY.encode())  # no such endpoint

    stats = receiver.stats()
    assert (stats["valid"], stats["invalid"], stats["duplicates"]) == (3, 3, 1)
    assert 0 < stats["first"] <= stats["last"]


def test_configure_starts_the_count_over():
    secret = secret_generate()
    receiver = Receiver()
    receiver.configure([secret])
    receiver.deliver("/hook/0", _signed(secret), BODY.encode())

    receiver.configure([secret])

    assert receiver.stats() == {"valid": 0, "invalid": 0, "duplicates": 0, "first": 0.0, "last": 0.0}

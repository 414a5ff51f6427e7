"""Connection discipline's rules (messaging/outbound/direct/spacing.py), on Redis and in-process: a refusal
pauses the destination and allows one new connection per spacing, the spacing doubles per refusal after a
pause (not within one) up to its cap, and halves after a spacing of successes until it is gone."""

import time

import pytest

from messaging.outbound.direct import spacing

pytestmark = pytest.mark.django_db

BASE = 0.2


@pytest.fixture(params=["redis", "in-process"])
def spaced(request, settings):
    settings.MAILSERVICE_MX_SPACING_BASE = BASE
    settings.MAILSERVICE_MX_SPACING_MAX = 4 * BASE
    if request.param == "in-process":
        settings.REDIS_URL = None
    yield
    spacing._local.clear()


def spaced_now(destination: str) -> spacing.Spaced:
    state = spacing.spacing_of(destination)
    assert state is not None
    return state


def pause_over(destination: str) -> None:
    time.sleep(spaced_now(destination).wait + 0.02)


def test_a_refusal_pauses_the_destination_and_allows_one_new_connection_per_spacing(spaced):
    assert spacing.spacing_of("example.org") is None
    assert spacing.claim_connection("example.org") == 0  # never refused: free

    assert spacing.refused("example.org", reason="421 4.7.0 too many connections") == BASE
    state = spaced_now("example.org")
    assert 0 < state.wait <= BASE and "421 4.7.0" in state.why
    assert spacing.spacing_of("other.example") is None  # per destination
    assert 0 < spacing.claim_connection("example.org") <= BASE

    pause_over("example.org")
    assert spacing.claim_connection("example.org") == 0  # the one new connection of this spacing
    assert 0 < spacing.claim_connection("example.org") <= BASE  # and no second one


def test_the_spacing_doubles_per_refusal_after_a_pause_up_to_its_cap_and_eases_after_successes(spaced):
    assert spacing.refused("example.org", reason="450 4.7.1") == BASE
    assert spacing.refused("example.org", reason="450 4.7.1") == BASE  # begun before the pause: no doubling
    intervals = []
    for _ in range(3):
        pause_over("example.org")
        intervals.append(spacing.refused("example.org", reason="450 4.7.1"))
    assert intervals == [2 * BASE, 4 * BASE, 4 * BASE]  # capped at MAILSERVICE_MX_SPACING_MAX

    spacing.succeeded("example.org")  # within the spacing since the refusal: nothing yet
    assert spaced_now("example.org").interval == 4 * BASE
    for expected in (2 * BASE, BASE):
        time.sleep(spaced_now("example.org").interval + 0.02)
        spacing.succeeded("example.org")
        assert spaced_now("example.org").interval == pytest.approx(expected)
    time.sleep(BASE + 0.02)
    spacing.succeeded("example.org")
    assert spacing.spacing_of("example.org") is None  # under the base: free again

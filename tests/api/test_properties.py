"""Property tests: the Mailbox grammar against an independent reading of spec 2.5, and cursors."""

import re
from typing import Any

import pytest
from django.core import signing
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from mailservice import mailbox
from messaging.selectors import message_list
from tests.conftest import client_for
from tests.factories import MessageFactory


def _address_ok(address: str) -> bool:
    local, at, domain = address.partition("@")
    if not at or not local or not domain:
        return False
    for character in local + domain:
        if character in "<>@,\x00" or character.isspace():
            return False
    return "." in domain


def reference_is_mailbox(value: str) -> bool:
    """Spec 2.5 read step by step, written without regular expressions."""
    if not 3 <= len(value) <= 320:
        return False
    if "<" not in value:
        return _address_ok(value)
    opening = value.index("<")
    display, address = value[: opening - 1], value[opening + 1 : -1]
    if opening == 0 or value[opening - 1] != " " or not value.endswith(">") or not display:
        return False
    if any(character in "<>\r\n\x00" for character in display):
        return False
    return _address_ok(address)


_TRICKY = list("ab.@<> ,\r\n\t\x00\x1c\x85\u00a0\u2028\ufeff\u00e9\U0001f600") + ["ex", ".org", "x@y.z"]
_pieces = st.lists(st.sampled_from(_TRICKY) | st.characters(exclude_categories=("Cs",)), max_size=12).map("".join)
mailbox_like = st.one_of(
    _pieces,
    st.builds(lambda local, domain: f"{local}@{domain}", _pieces, _pieces),
    st.builds(lambda display, local, domain: f"{display} <{local}@{domain}>", _pieces, _pieces, _pieces),
    st.builds(lambda n, tail: "a" * n + tail, st.integers(300, 330), st.sampled_from(["@example.org", "@e", "@x.y"])),
)


@settings(max_examples=2000, deadline=None)
@given(mailbox_like)
def test_the_mailbox_grammar_agrees_with_an_independent_reading_of_the_spec(value):
    expected = reference_is_mailbox(value)
    assert mailbox.is_mailbox(value) is expected
    if 3 <= len(value) <= 320:  # the document states the length apart from the pattern
        assert bool(re.fullmatch(mailbox.OPENAPI_PATTERN, value)) is expected


def test_the_generator_reaches_both_answers():
    """Guards the property above against a strategy that only ever produces invalid strings."""
    assert reference_is_mailbox(find(mailbox_like, reference_is_mailbox))
    assert not reference_is_mailbox(find(mailbox_like, lambda value: not reference_is_mailbox(value)))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=4),
    max_leaves=8,
)


@pytest.mark.django_db
class TestCursorProperties:
    @pytest.fixture
    def setup(self, domain, full_key, other_domain_key, settings) -> dict[str, Any]:
        settings.MAILSERVICE_RATE_LIMIT = "100000/m"  # hundreds of requests in one test
        mine = {MessageFactory(domain=domain).public_id for _ in range(4)}
        for _ in range(4):
            MessageFactory(domain=other_domain_key.domain)
        foreign = message_list(domain=other_domain_key.domain, direction=None, limit=1, after=None).next_cursor
        own = message_list(domain=domain, direction=None, limit=1, after=None).next_cursor
        return {"mine": mine, "domain": domain, "client": client_for(full_key), "foreign": foreign, "own": own}

    def _check(self, setup: dict[str, Any], after: str) -> None:
        response = setup["client"].get("/v1/messages", {"after": after})
        assert response.status_code in (200, 400), (after, response.status_code)
        if response.status_code == 400:
            assert response.json()["error"]["code"] in {"InvalidCursor", "ValidationError"}
            return
        items = response.json()["data"]
        assert {item["id"] for item in items} <= setup["mine"]
        assert {item["domain_id"] for item in items} <= {setup["domain"].public_id}

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_any_string_is_a_400_or_a_page_of_my_own_messages(self, setup, data):
        base = data.draw(st.sampled_from([setup["own"], setup["foreign"], ""]))
        mutation = data.draw(
            st.one_of(
                st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=600),
                st.builds(
                    lambda i, s: base[:i] + s + base[i + 1 :],
                    st.integers(0, max(len(base) - 1, 0)),
                    st.text(max_size=3),
                ),
                st.integers(1, max(len(base), 1)).map(lambda i: base[:i]),
                st.just(base),
            )
        )
        self._check(setup, mutation)

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(data=st.data())
    def test_even_a_validly_signed_odd_payload_is_never_a_500(self, setup, data):
        """Should the signing key leak, odd positions must still only ever read my own messages."""
        position = data.draw(
            st.one_of(
                _json,
                st.fixed_dictionaries(
                    {
                        "d": st.sampled_from([setup["domain"].public_id, "dom_other"]) | _json,
                        "f": st.sampled_from(["", "sent", "received"]) | _json,
                        "t": st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat())
                        | st.text(max_size=40)
                        | _json,
                        "i": st.text(max_size=40) | _json,
                    }
                ),
            )
        )
        self._check(setup, signing.dumps(position, salt="messaging.message_list.cursor", compress=False))

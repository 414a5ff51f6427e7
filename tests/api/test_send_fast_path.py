"""The inline send's fast path (serializers._valid_inline_send_request) against the serializer it
stands in for: on every body, the same SendRequest or the same refusal (the serializer then words it)."""

from typing import Any

import pytest
from hypothesis import example, find, given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from mailservice.api import serializers
from mailservice.api.serializers import InlineSendRequestSerializer, parse_send_request
from messaging.services import SendRequest
from tests.api.test_properties import mailbox_like

_VALID = ["a@b.co", "Bob <bob@example.org>", "r@example.org", "jos\u00e9@b\u00fccher.example"]
_REFUSED = [
    "ab",
    "a@b",
    "x@[1.2.3]",
    '"unclosed@example.org',
    "a\x00b@example.org",
    "Bob\x00 <bob@example.org>",
    "\ud800@example.org",
    "Bob \ud800 <bob@example.org>",
    "a@" + "b" * 400 + ".org",
]
_valid_mailbox = st.sampled_from(_VALID)
_valid_list = _valid_mailbox | st.lists(_valid_mailbox, min_size=1, max_size=3)
_mailbox = _valid_mailbox | st.sampled_from(_REFUSED) | mailbox_like
_not_a_string = st.sampled_from([None, 5, 1.5, True, {}, {"a": "b@c.de"}])


def _addresses(max_items: int) -> st.SearchStrategy:
    """Anything a recipient field may be sent, its count limit (and the total's) at the boundary included."""
    return st.one_of(
        _mailbox,
        _not_a_string,
        st.lists(_mailbox | _not_a_string, max_size=3),
        st.integers(max_items - 1, max_items + 1).map(lambda count: ["r@example.org"] * count),
        st.just([]),
    )


_short_text = st.text(max_size=20)
_text = (
    _short_text
    | st.sampled_from(
        ["", "a\x00b", "x\udc00y", "x" * serializers.MAX_TEXT_LENGTH, "x" * (serializers.MAX_TEXT_LENGTH + 1)]
    )
    | _not_a_string
)
_ANY_VALUE = {
    "from": _mailbox | _not_a_string,
    "to": _addresses(50),
    "cc": _addresses(50),
    "bcc": _addresses(50),
    "replyTo": _addresses(10),
    "subject": _text,
    "text": _text,
    "html": _text,
    "unknown": st.just("x"),
}
_valid_bodies = st.fixed_dictionaries(
    {"from": _valid_mailbox, "to": _valid_list, "subject": _short_text, "text": _short_text},
    optional={"cc": _valid_list, "bcc": _valid_list, "replyTo": _valid_list, "html": _short_text},
)


def _changed(body: dict[str, Any]) -> st.SearchStrategy:
    """`body` with one field set to anything (a new one included), or one field left out."""
    return st.sampled_from(sorted(_ANY_VALUE)).flatmap(
        lambda name: (
            _ANY_VALUE[name].map(lambda value: {**body, name: value})
            | st.just({key: value for key, value in body.items() if key != name})
        )
    )


# Valid bodies and bodies one change away from valid, where the rules' boundaries are.
_nearly_valid_bodies = _valid_bodies.flatmap(lambda body: st.just(body) | _changed(body) | _changed(body))
# Any combination of fields, each missing, unknown or of any type.
_any_bodies = st.fixed_dictionaries({}, optional=_ANY_VALUE)
inline_bodies = _nearly_valid_bodies | _any_bodies


def serializer_answer(body: dict[str, Any]) -> SendRequest | None:
    serializer = InlineSendRequestSerializer(data=body)
    return serializer.to_send_request() if serializer.is_valid() else None


def _boundary(**fields: Any) -> dict[str, Any]:
    return {"from": "a@b.co", "to": "c@d.ef", "subject": "Hi", "text": "x", **fields}


_r = ["r@example.org"]


@settings(max_examples=1000, deadline=None)  # 3,000 took 27 s of CI; the boundaries are @example-pinned
@given(inline_bodies)
# Each count limit at and one past its boundary, whatever the generator happens to draw.
@example(_boundary(replyTo=_r * 10))
@example(_boundary(replyTo=_r * 11))
@example(_boundary(to=_r * 50))
@example(_boundary(to=_r * 51))
@example(_boundary(to=_r * 25, cc=_r * 24, bcc=_r))
@example(_boundary(to=_r * 25, cc=_r * 25, bcc=_r))
def test_the_fast_path_gives_the_serializers_answer_on_every_body(body):
    assert serializers._valid_inline_send_request(body) == serializer_answer(body)


def test_the_generator_reaches_both_answers():
    """Guards the property above against a strategy that only ever produces refused bodies (or only valid
    ones). `find` raises NoSuchExample when no body meets the condition."""
    assert serializer_answer(find(inline_bodies, lambda body: serializer_answer(body) is not None)) is not None
    find(inline_bodies, lambda body: serializer_answer(body) is None and "unknown" not in body)
    find(_nearly_valid_bodies, lambda body: serializer_answer(body) is None)


def test_a_valid_inline_body_is_taken_without_building_a_serializer(monkeypatch):
    body = {"from": "Bob <bob@example.org>", "to": ["a@b.co", "c@d.ef"], "subject": "Hi", "text": "Hello"}
    monkeypatch.setattr(serializers, "InlineSendRequestSerializer", None)  # the fast path must not need it
    request = parse_send_request(body)
    assert request == SendRequest(
        from_address="Bob <bob@example.org>",
        to=["a@b.co", "c@d.ef"],
        cc=[],
        bcc=[],
        reply_to=[],
        subject="Hi",
        text="Hello",
        html=None,
    )


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"from": "a@b.co", "to": "c@d.ef", "subject": "Hi", "text": None}, "text"),
        ({"from": "a@b.co", "to": "c@d.ef", "subject": "Hi"}, "text"),
        ({"from": "a@b.co", "to": ["c@d.ef"] * 30, "cc": ["c@d.ef"] * 21, "subject": "Hi", "text": "x"}, "to"),
    ],
)
def test_a_body_the_fast_path_passes_over_is_refused_by_the_serializer_with_its_words(body, named):
    with pytest.raises(ValidationError) as refused:
        parse_send_request(body)
    assert named in str(refused.value.detail)

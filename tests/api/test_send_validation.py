"""POST /v1/send input rules (spec 2.5, 4.1, 8): each limit at its boundary and one past it."""

import json
from typing import Any

import pytest

from messaging.models import Message
from tests.api.wire import OMIT, assert_api_error, inline_body, template_body
from tests.factories import TemplateFactory, TemplateVersionFactory

pytestmark = pytest.mark.django_db

MAX_SAFE_INTEGER = 9007199254740991


def _mailbox(length: int, domain: str = "example.org") -> str:
    return "a" * (length - len(domain) - 1) + "@" + domain


def _addresses(count: int) -> list[str]:
    return [f"r{index}@example.org" for index in range(count)]


@pytest.fixture
def template(domain):
    """A published template using only {{ name }}, addressed by slug `welcome`."""
    return TemplateVersionFactory(template=TemplateFactory(domain=domain, slug="welcome"), number=1).template


def _post(api, body: Any):
    # json.dumps escapes non-ASCII, so lone surrogates reach the server as JSON escapes.
    return api.post("/v1/send", data=json.dumps(body), content_type="application/json")


def assert_accepted(response) -> None:
    assert response.status_code == 200, response.json()
    assert Message.objects.filter(public_id=response.json()["id"]).exists()


def assert_rejected(response, field: str) -> None:
    error = assert_api_error(response, 400, "ValidationError")
    assert field in error["message"], error["message"]
    assert not Message.objects.exists()


MAILBOXES = [
    ("a@b.co", True),
    (_mailbox(320), True),
    (_mailbox(321), False),
    ("a@", False),
    ("ab", False),
    ("Bob <bob@example.org>", True),
    ('Bob, Jr. (Sales) "x" @ <bob@example.org>', True),
    ("  <bob@example.org>", True),
    ("B" * (320 - len(" <bob@example.org>")) + " <bob@example.org>", True),
    ("B" * (321 - len(" <bob@example.org>")) + " <bob@example.org>", False),
    ("Bob<bob@example.org>", False),
    ("Bob  bob@example.org", False),
    (" <bob@example.org>", False),
    ("Bob <bob@example.org", False),
    ("Bob <bob@example.org> ", False),
    ("Bob\r <bob@example.org>", False),
    ("Bob\n <bob@example.org>", False),
    ("B<b <bob@example.org>", False),
    ("B>b <bob@example.org>", False),
    ("Bob <b ob@example.org>", False),
    ("Bob <bob@example>", False),
    ("bob@example", False),
    ("bo b@example.org", False),
    ("bob@exa mple.org", False),
    ("bo\tb@example.org", False),
    ("bob@example.org\n", False),
    ("bo,b@example.org", False),
    ("bob@exa,mple.org", False),
    ("bo<b@example.org", False),
    ("bob@example.org>", False),
    ("b@b@example.org", False),
    ("@example.org", False),
    # The grammar's "a dot in the domain" is not enough to deliver: a domain must be a host name.
    ("bob@.", False),
    ("bob@example.", False),
    ("bo\u00a0b@example.org", False),
    ("bo\u2028b@example.org", False),
    ("bo\x1fb@example.org", False),
    ("bo\ufeffb@example.org", False),  # not whitespace, but invisible: refused (tests/api/test_send_addresses.py)
    ("j\u00f6rg@b\u00fccher.example", True),
    ("\U0001f600@example.org", True),
    ("bo\x00b@example.org", False),
    ("B\x00b <bob@example.org>", False),
    ("bo\ud800b@example.org", False),
]


@pytest.mark.parametrize(("value", "valid"), MAILBOXES)
@pytest.mark.parametrize("field", ["to", "cc", "bcc", "replyTo"])
def test_mailbox_grammar(api, value, valid, field):
    response = _post(api, inline_body(**{field: value}))
    if valid:
        assert_accepted(response)
    else:
        assert_rejected(response, field)


@pytest.mark.parametrize(
    ("sender", "valid"),
    [("hello@acme.example.com", True), ("Acme <hello@acme.example.com>", True), ("Acme<hello@acme.example.com>", False)]
    + [("hel lo@acme.example.com", False), ("Acme\n <hello@acme.example.com>", False), (["a@acme.example.com"], False)],
)
def test_the_sender_is_one_mailbox(api, sender, valid):
    response = _post(api, inline_body(**{"from": sender}))
    if valid:
        assert_accepted(response)
    else:
        assert_rejected(response, "from")


@pytest.mark.parametrize(
    ("recipients", "valid", "field"),
    [
        ({"to": _addresses(50)}, True, None),
        ({"to": _addresses(51)}, False, "to"),
        ({"cc": _addresses(51), "to": OMIT}, False, "cc"),
        ({"bcc": _addresses(51), "to": OMIT}, False, "bcc"),
        ({"to": _addresses(30), "cc": _addresses(20)}, True, None),
        ({"to": _addresses(30), "cc": _addresses(10), "bcc": _addresses(11)}, False, "to"),
        ({"to": OMIT, "bcc": "hidden@example.org"}, True, None),
        ({"to": OMIT, "cc": ["a@example.org"]}, True, None),
        ({"to": OMIT}, False, "to"),
        ({"to": []}, False, "to"),
        ({"cc": []}, False, "cc"),
        ({"to": [_mailbox(320)], "cc": ["ok@example.org", "not an address"]}, False, "cc"),
        ({"replyTo": _addresses(10)}, True, None),
        ({"replyTo": _addresses(11)}, False, "replyTo"),
        ({"replyTo": []}, False, "replyTo"),
        ({"replyTo": "reply@example.org"}, True, None),
    ],
)
def test_recipient_counts(api, recipients, valid, field):
    response = _post(api, inline_body(**recipients))
    if valid:
        assert_accepted(response)
    else:
        assert_rejected(response, field)


@pytest.mark.parametrize(
    ("changes", "valid", "field"),
    [
        ({"subject": "s" * 100000}, True, None),
        ({"subject": "s" * 100001}, False, "subject"),
        ({"subject": ""}, True, None),
        ({"subject": "\U0001f600" * 100000}, True, None),
        ({"text": "t" * 100000}, True, None),
        ({"text": "t" * 100001}, False, "text"),
        ({"html": "h" * 100000, "text": OMIT}, True, None),
        ({"html": "h" * 100001}, False, "html"),
        ({"text": OMIT}, False, "text"),
        ({"subject": OMIT}, False, "subject"),
        ({"text": " padded \n"}, True, None),
    ],
)
def test_inline_content_limits(api, changes, valid, field):
    response = _post(api, inline_body(**changes))
    if valid:
        assert_accepted(response)
        if "text" in changes and changes["text"] is not OMIT:
            assert Message.objects.get().text == changes["text"]  # taken as is, never trimmed
    else:
        assert_rejected(response, field)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"from": 5}, "from"),
        ({"from": None}, "from"),
        ({"to": 5}, "to"),
        ({"to": [5]}, "to"),
        ({"to": {"email": "a@example.org"}}, "to"),
        ({"cc": True}, "cc"),
        ({"replyTo": 1.5}, "replyTo"),
        ({"subject": 5}, "subject"),
        ({"subject": None}, "subject"),
        ({"subject": ["Hi"]}, "subject"),
        ({"text": True}, "text"),
        ({"text": None}, "text"),
        ({"html": {"x": 1}}, "html"),
        ({"template": "welcome"}, "template"),
        ({"template": ["welcome"]}, "template"),
        ({"template": None}, "template"),
    ],
)
def test_no_type_coercion(api, changes, field):
    body = template_body(changes["template"]) if "template" in changes else inline_body(**changes)
    assert_rejected(_post(api, body), field)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"subject": "a\x00b"}, "subject"),
        ({"text": "a\x00b"}, "text"),
        ({"html": "\x00"}, "html"),
        ({"subject": "\ud800"}, "subject"),
        ({"text": "a\udfffb"}, "text"),
        ({"to": "a\x00@example.org"}, "to"),
        ({"from": "\ud83d <hello@acme.example.com>"}, "from"),
    ],
)
def test_nul_and_lone_surrogates_are_400_not_a_database_error(api, changes, field):
    assert_rejected(_post(api, inline_body(**changes)), field)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (inline_body(cc_list=["a@example.org"]), "cc_list"),
        (inline_body(attachments=[]), "attachments"),
        (inline_body(reply_to="a@example.org"), "reply_to"),
        (inline_body(From="hello@acme.example.com"), "From"),
        (inline_body(**{"\ud800": 1}), "\\ud800"),
        (inline_body(template={"id": "welcome"}), "text"),  # both variants at once: fits neither
        (template_body({"id": "welcome"}, html="<p>x</p>"), "html"),
        (template_body({"id": "welcome", "vars": {}}), "template.vars"),
        (template_body({"id": "welcome", "variables": {}, "Version": 1}), "template.Version"),
        (inline_body(subject=OMIT, text=OMIT), "subject"),  # neither content nor template
        ({}, "from"),
    ],
)
def test_unknown_fields_and_bodies_fitting_neither_variant(api, template, body, field):
    assert_rejected(_post(api, body), field)


@pytest.mark.parametrize("body", [[], [inline_body()], "a string", 5, None, True])
def test_the_body_must_be_a_json_object(api, body):
    assert_rejected(_post(api, body), "body")


def _variables(count: int) -> dict[str, Any]:
    return {"name": "Ann", **{f"v{index}": index for index in range(count - 1)}}


@pytest.mark.parametrize(
    ("reference", "valid", "field"),
    [
        ({"id": "welcome", "variables": _variables(50)}, True, None),
        ({"id": "welcome", "variables": _variables(51)}, False, "template.variables"),
        ({"id": "welcome", "variables": {"name": "Ann", "a" * 50: 1}}, True, None),
        ({"id": "welcome", "variables": {"name": "Ann", "a" * 51: 1}}, False, "template.variables"),
        ({"id": "welcome", "variables": {"name": "Ann", "a_B9": 1}}, True, None),
        ({"id": "welcome", "variables": {"name": "Ann", "9a": 1}}, False, "template.variables"),
        ({"id": "welcome", "variables": {"name": "Ann", "_a": 1}}, False, "template.variables"),
        ({"id": "welcome", "variables": {"name": "Ann", "a-b": 1}}, False, "template.variables"),
        ({"id": "welcome", "variables": {"name": "Ann", "": 1}}, False, "template.variables"),
        ({"id": "welcome", "variables": {"name": "x" * 2000}}, True, None),
        ({"id": "welcome", "variables": {"name": "x" * 2001}}, False, "name"),
        ({"id": "welcome", "variables": {"name": "\U0001f600" * 2000}}, True, None),
        ({"id": "welcome", "variables": {"name": "a\x00"}}, False, "name"),
        ({"id": "welcome", "variables": {"name": MAX_SAFE_INTEGER}}, True, None),
        ({"id": "welcome", "variables": {"name": -MAX_SAFE_INTEGER}}, True, None),
        ({"id": "welcome", "variables": {"name": MAX_SAFE_INTEGER + 1}}, False, "name"),
        ({"id": "welcome", "variables": {"name": -MAX_SAFE_INTEGER - 1}}, False, "name"),
        ({"id": "welcome", "variables": {"name": 1e300}}, False, "name"),
        ({"id": "welcome", "variables": {"name": 2.5}}, True, None),
        ({"id": "welcome", "variables": {"name": True}}, True, None),
        ({"id": "welcome", "variables": {"name": False}}, True, None),
        ({"id": "welcome", "variables": {"name": None}}, False, "name"),
        ({"id": "welcome", "variables": {"name": {"first": "Ann"}}}, False, "name"),
        ({"id": "welcome", "variables": {"name": ["Ann"]}}, False, "name"),
        ({"id": "welcome", "variables": ["name"]}, False, "template.variables"),
        ({"id": "welcome", "variables": "name=Ann"}, False, "template.variables"),
        ({"id": "welcome", "version": 1, "variables": {"name": "Ann"}}, True, None),
        ({"id": "welcome", "version": 0, "variables": {"name": "Ann"}}, False, "template.version"),
        ({"id": "welcome", "version": -1, "variables": {"name": "Ann"}}, False, "template.version"),
        ({"id": "welcome", "version": "1", "variables": {"name": "Ann"}}, False, "template.version"),
        ({"id": "welcome", "version": 1.5, "variables": {"name": "Ann"}}, False, "template.version"),
        ({"id": "welcome", "version": True, "variables": {"name": "Ann"}}, False, "template.version"),
        ({"id": "welcome", "version": None, "variables": {"name": "Ann"}}, False, "template.version"),
        ({"id": "a" * 101}, False, "template.id"),
        ({"id": ""}, False, "template.id"),
        ({"id": "-welcome"}, False, "template.id"),
        ({"id": "wel come"}, False, "template.id"),
        ({"id": 5}, False, "template.id"),
        ({"variables": {"name": "Ann"}}, False, "template.id"),
    ],
)
def test_template_reference_rules(api, template, reference, valid, field):
    response = _post(api, template_body(reference))
    if valid:
        assert_accepted(response)
    else:
        assert_rejected(response, field)


@pytest.mark.parametrize(("subject", "valid"), [("s" * 1000, True), ("s" * 1001, False), (5, False)])
def test_a_template_sends_subject_is_at_most_1000_characters(api, template, subject, valid):
    response = _post(api, template_body({"id": "welcome", "variables": {"name": "Ann"}}, subject=subject))
    if valid:
        assert_accepted(response)
    else:
        assert_rejected(response, "subject")


def test_the_longest_template_id_is_accepted(api, domain):
    TemplateVersionFactory(template=TemplateFactory(domain=domain, slug="a" * 100), number=1)
    assert_accepted(_post(api, template_body({"id": "a" * 100, "variables": {"name": "Ann"}})))


def test_one_message_names_every_offending_field(api):
    error = assert_api_error(_post(api, inline_body(subject=5, to="nope", extra=1)), 400, "ValidationError")
    assert all(name in error["message"] for name in ("subject", "to", "extra")), error["message"]


def test_each_bad_address_of_a_list_is_named_by_its_position_alone(api):
    """One field validates every address: an error belongs to its own item, never to the next one."""
    to = ["ok0@example.org", "nope", "ok2@example.org", "Bad\x00 <x@example.org>", "ok4@example.org"]
    error = assert_api_error(_post(api, inline_body(to=to)), 400, "ValidationError")
    assert error["message"] == (
        "to.1: must be an address like name@example.com or Name <name@example.com> (3 to 320 characters); "
        "to.3: Null characters are not allowed."
    )
    assert not Message.objects.exists()


def test_an_unknown_field_named_body_is_named(api):
    error = assert_api_error(_post(api, inline_body(body="Hello")), 400, "ValidationError")
    assert error["message"] == "body: unknown field"


def test_a_missing_subject_and_missing_content_are_both_named(api):
    error = assert_api_error(_post(api, inline_body(subject=OMIT, text=OMIT)), 400, "ValidationError")
    assert error["message"] == "subject: This field is required.; text: at least one of text, html is required"


def test_every_missing_and_unknown_field_is_named_at_once(api):
    body = inline_body(to=OMIT, subject=OMIT, text=OMIT, extra=1)
    error = assert_api_error(_post(api, body), 400, "ValidationError")
    for part in ("subject: ", "to: at least one of to, cc, bcc", "text: at least one of text, html", "extra: unknown"):
        assert part in error["message"], error["message"]


def test_a_nested_error_carries_its_path(api, template):
    body = template_body({"id": "welcome", "variables": {"name": 5.5, "bad name": 1}, "extra": 1})
    error = assert_api_error(_post(api, body), 400, "ValidationError")
    assert "template.variables: " in error["message"] and "template.extra: unknown field" in error["message"]


def test_a_nested_object_of_the_wrong_type_is_named_without_a_made_up_key(api):
    error = assert_api_error(_post(api, template_body("welcome")), 400, "ValidationError")
    assert error["message"].startswith("template: "), error["message"]

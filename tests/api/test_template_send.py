"""Template sends: rendering, escaping, version choice and the 400s for what cannot be used."""

import json

import pytest

from messaging.models import Message
from templates_app.services import template_version_publish, template_version_set_published
from tests.api.wire import assert_api_error, template_body
from tests.factories import DomainFactory, TemplateFactory, TemplateVersionFactory

pytestmark = pytest.mark.django_db


def _send(api, reference, **changes):
    return api.post("/v1/send", data=json.dumps(template_body(reference, **changes)), content_type="application/json")


def _stored(response) -> Message:
    assert response.status_code == 200, response.json()
    return Message.objects.get(public_id=response.json()["id"])


@pytest.fixture
def welcome(domain):
    return template_version_publish(
        domain=domain,
        slug="welcome",
        subject="Hello {{ name }}",
        text="Hi {{name}}, your plan: {{ plan }}. Active: {{ active }}.",
        html="<p>Hi {{ name }}, your plan: {{plan}}</p>",
    ).template


def test_placeholders_are_filled_and_values_escaped_in_html_only(api, welcome):
    variables = {"name": 'Ann <ann> & "co"', "plan": 9007199254740991, "active": True}

    message = _stored(_send(api, {"id": "welcome", "variables": variables}))

    assert message.subject == 'Hello Ann <ann> & "co"'
    assert message.text == 'Hi Ann <ann> & "co", your plan: 9007199254740991. Active: true.'
    assert message.html == "<p>Hi Ann &lt;ann&gt; &amp; &quot;co&quot;, your plan: 9007199254740991</p>"
    assert (message.template, message.template_version) == (welcome, 1)


def test_the_template_is_found_by_public_id_as_well_as_by_slug(api, welcome):
    variables = {"name": "Ann", "plan": "pro", "active": False}
    assert _stored(_send(api, {"id": welcome.public_id, "variables": variables})).template == welcome


def test_a_missing_variable_is_a_400_naming_it_and_nothing_is_stored(api, welcome):
    error = assert_api_error(
        _send(api, {"id": "welcome", "variables": {"name": "Ann", "active": True}}), 400, "MissingTemplateVariable"
    )
    assert "plan" in error["message"]
    assert not Message.objects.exists()


def test_a_request_subject_overrides_the_templates_and_is_rendered_too(api, welcome):
    variables = {"name": "Ann", "plan": "pro", "active": True}
    message = _stored(_send(api, {"id": "welcome", "variables": variables}, subject="Plan {{ plan }} for {{name}}"))
    assert message.subject == "Plan pro for Ann"


def test_the_newest_published_version_is_used_by_default(api, domain):
    template = TemplateFactory(domain=domain, slug="news")
    TemplateVersionFactory(template=template, number=1, subject="v1", text="one")
    TemplateVersionFactory(template=template, number=2, subject="v2", text="two")
    TemplateVersionFactory(template=template, number=3, subject="v3", text="three", published=False)

    newest = _stored(_send(api, {"id": "news", "variables": {"name": "Ann"}}))
    named = _stored(_send(api, {"id": "news", "version": 1, "variables": {"name": "Ann"}}))

    assert (newest.subject, newest.text, newest.template_version) == ("v2", "two", 2)
    assert (named.subject, named.text, named.template_version) == ("v1", "one", 1)


def test_a_template_with_only_html_stores_no_text(api, domain):
    TemplateVersionFactory(
        template=TemplateFactory(domain=domain, slug="html-only"), number=1, text="", html="<b>x</b>"
    )
    message = _stored(_send(api, {"id": "html-only", "variables": {"name": "Ann"}}))
    assert (message.text, message.html) == (None, "<b>x</b>")


@pytest.mark.parametrize(
    "reference",
    [
        {"id": "nope"},
        {"id": "welcome", "version": 2},
        {"id": "welcome", "version": 2147483647},
        {"id": "welcome", "version": 2147483648},
        {"id": "welcome", "version": 9007199254740993},
        {"id": "welcome", "version": 10**30},
        {"id": "tpl_doesnotexist0000000000"},
    ],
)
def test_unknown_templates_and_versions_are_400(api, welcome, reference):
    error = assert_api_error(_send(api, reference), 400, "TemplateNotFound")
    assert "template" in error["message"]
    assert not Message.objects.exists()


def test_a_final_newline_does_not_slip_past_the_id_pattern(api, welcome):
    # The spec's pattern is ECMA-262, where `$` is the very end; Python's `$` would allow "welcome\n".
    error = assert_api_error(_send(api, {"id": "welcome\n"}), 400, "ValidationError")
    assert "template.id" in error["message"]


def test_an_unpublished_version_is_400(api, welcome):
    template_version_set_published(version=welcome.versions.get(number=1), published=False)
    assert_api_error(_send(api, {"id": "welcome"}), 400, "TemplateNotFound")
    assert_api_error(_send(api, {"id": "welcome", "version": 1}), 400, "TemplateNotFound")


def test_another_domains_template_looks_missing(api, welcome):
    foreign = TemplateVersionFactory(template=TemplateFactory(domain=DomainFactory(), slug="secret"), number=1)
    by_slug = assert_api_error(_send(api, {"id": "secret"}), 400, "TemplateNotFound")
    by_id = assert_api_error(_send(api, {"id": foreign.template.public_id}), 400, "TemplateNotFound")
    missing = assert_api_error(_send(api, {"id": "missing"}), 400, "TemplateNotFound")
    assert by_slug["message"].replace("secret", "missing") == missing["message"]
    assert foreign.subject not in by_id["message"]

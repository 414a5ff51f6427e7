"""Templates in the console: versions, previews with sample variables, publish and unpublish."""

import html as html_lib
import json

import pytest
from django.core.management import CommandError, call_command

from templates_app.models import Template, TemplateVersion
from tests.factories import TemplateFactory, TemplateVersionFactory

pytestmark = pytest.mark.django_db

VERSIONS = "/admin/templates_app/templateversion/"


@pytest.fixture
def template(domain):
    return TemplateFactory(domain=domain, slug="welcome")


def test_the_template_page_lists_versions_and_shows_how_to_send_with_it(operator, template):
    TemplateVersionFactory(template=template, number=1, subject="First")
    TemplateVersionFactory(template=template, number=2, subject="Second", published=False)

    html = operator.get(f"/admin/templates_app/template/{template.pk}/change/").content.decode()

    assert "First" in html and "Second" in html
    assert f'"id": "{template.public_id}"' in html and '"id": "welcome"' in html


def test_a_new_version_is_numbered_after_the_last_and_starts_as_a_draft(operator, template):
    TemplateVersionFactory(template=template, number=3)

    response = operator.post(
        f"{VERSIONS}add/", {"template": template.pk, "subject": "Hi {{ name }}", "text": "Hello {{ name }}", "html": ""}
    )

    assert response.status_code == 302
    version = TemplateVersion.objects.get(template=template, number=4)
    assert not version.published and version.text == "Hello {{ name }}"


def test_a_version_needs_text_or_html(operator, template):
    response = operator.post(f"{VERSIONS}add/", {"template": template.pk, "subject": "Hi", "text": "", "html": ""})

    assert response.status_code == 200 and b"A template version needs text or html" in response.content
    assert not TemplateVersion.objects.exists()


def test_the_preview_renders_sample_variables_side_by_side_with_sandboxed_html(operator, template):
    version = TemplateVersionFactory(
        template=template, subject="Hi {{ name }}", text="Hello {{ name }}", html="<p>Hello <b>{{ name }}</b></p>"
    )
    url = f"{VERSIONS}{version.pk}/change/"

    default = operator.get(url).content.decode()
    assert "Hello [name]" in default
    assert 'name="_save"' not in default  # versions are immutable

    page = operator.get(url, {"variables": json.dumps({"name": "<Ada>"})}).content.decode()
    assert '<pre id="preview-text"' in page and "Hello &lt;Ada&gt;" in page
    iframe = page[page.index('<iframe class="ms-html"') :]
    assert iframe.startswith('<iframe class="ms-html" sandbox=""')
    srcdoc = html_lib.unescape(iframe.split('srcdoc="')[1].split('"')[0])
    # The variable is escaped inside the HTML, after the preview's own policy (tests/console/test_previews.py).
    assert srcdoc.startswith('<meta http-equiv="Content-Security-Policy" content="default-src \'none\';')
    assert srcdoc.endswith('img-src data:"><p>Hello <b>&lt;Ada&gt;</b></p>')


@pytest.mark.parametrize(
    ("variables", "error"),
    [
        ("{not json", "Sample variables are not valid JSON"),
        ('["a"]', "Sample variables must be a JSON object"),
        ("{}", "no value for placeholder {{ name }}"),
    ],
)
def test_a_bad_preview_shows_the_error(operator, template, variables, error):
    version = TemplateVersionFactory(template=template)

    response = operator.get(f"{VERSIONS}{version.pk}/change/", {"variables": variables})

    assert response.status_code == 200
    assert error in html_lib.unescape(response.content.decode())


def test_publish_and_unpublish(operator, template):
    version = TemplateVersionFactory(template=template, published=False)

    operator.post(f"{VERSIONS}{version.pk}/publish/")
    version.refresh_from_db()
    assert version.published and version.published_at is not None

    operator.post(VERSIONS, {"action": "unpublish", "_selected_action": [version.pk]})
    version.refresh_from_db()
    assert not version.published and version.published_at is None


def test_support_cannot_publish(support, template):
    version = TemplateVersionFactory(template=template, published=False)

    assert support.post(f"{VERSIONS}{version.pk}/publish/").status_code == 403
    version.refresh_from_db()
    assert not version.published


def test_a_template_is_created_with_its_first_version_on_one_page(operator, domain):
    form = operator.get("/admin/templates_app/template/add/").content.decode()
    assert 'name="subject"' in form and 'name="text"' in form and "{{ name }}" in form  # the placeholder help

    response = operator.post(
        "/admin/templates_app/template/add/",
        {
            "domain": domain.pk,
            "slug": "receipt",
            "subject": "Hi {{ name }}",
            "text": "Paid",
            "html": "",
            "publish": "on",
        },
    )

    assert response.status_code == 302, response.content
    version = TemplateVersion.objects.get(template__slug="receipt")
    assert (version.number, version.published, version.subject) == (1, True, "Hi {{ name }}")


@pytest.mark.parametrize("subject", ["Hi {{ name", "Hi {{ 1name }}", "Hi {{ name }} and {{"])
def test_a_broken_placeholder_is_a_form_error(operator, domain, subject):
    response = operator.post(
        "/admin/templates_app/template/add/",
        {"domain": domain.pk, "slug": "receipt", "subject": subject, "text": "Paid", "html": ""},
    )

    assert response.status_code == 200 and b"does not open a placeholder" in response.content
    assert not Template.objects.exists()


def test_publish_template_refuses_a_broken_placeholder(domain):
    with pytest.raises(CommandError, match="does not open a placeholder"):
        call_command("publish_template", domain.name, "welcome", "--subject", "Hi {{ name", "--text", "x")
    assert not Template.objects.exists()

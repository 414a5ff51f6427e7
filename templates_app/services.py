import html as html_lib
import re
from dataclasses import dataclass

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from domains.models import Domain
from mailservice.errors import ErrorCode, ValidationFailed
from templates_app.models import PLACEHOLDER, Template, TemplateVersion

Variables = dict[str, str | int | float | bool]


@dataclass(frozen=True)
class RenderedContent:
    subject: str
    text: str | None
    html: str | None


_OPENING = re.compile(r"\{\{")


def _check_placeholders(*, field: str, source: str) -> None:
    """Every `{{` opens a well-formed placeholder: a typo such as `{{ name` would otherwise be sent as it is."""
    placeholders = {match.start() for match in PLACEHOLDER.finditer(source)}
    for opening in _OPENING.finditer(source):
        if opening.start() not in placeholders:
            raise ValidationFailed(
                f"{field}: the '{{{{' at character {opening.start() + 1} does not open a placeholder; "
                "write {{ name }} (a letter, then letters, digits or _, at most 50)"
            )


def template_content_check(*, subject: str, text: str, html: str) -> None:
    # Before any row is created, so a bad version leaves no empty template behind.
    if not subject:
        raise ValidationFailed("A template version needs a subject")
    if not text and not html:
        raise ValidationFailed("A template version needs text or html")
    for field, source in (("subject", subject), ("text", text), ("html", html)):
        _check_placeholders(field=field, source=source)


def template_version_publish(
    *, domain: Domain, slug: str, subject: str, text: str = "", html: str = "", published: bool = True
) -> TemplateVersion:
    """Create the template if new and add the next version with this content, published unless told otherwise."""
    template_content_check(subject=subject, text=text, html=html)
    with transaction.atomic():
        template, created = Template.objects.select_for_update().get_or_create(domain=domain, slug=slug)
        if created:
            try:
                template.full_clean()
            except DjangoValidationError as exc:
                raise ValidationFailed(f"Invalid slug {slug!r}: {'; '.join(exc.messages)}") from None
        return template_version_create(template=template, subject=subject, text=text, html=html, published=published)


def template_version_create(
    *, template: Template, subject: str, text: str = "", html: str = "", published: bool = False
) -> TemplateVersion:
    """Add the template's next version (a draft unless published), numbered under a lock on the template."""
    template_content_check(subject=subject, text=text, html=html)
    with transaction.atomic():
        Template.objects.select_for_update().filter(pk=template.pk).first()
        number = (template.versions.aggregate(highest=Max("number"))["highest"] or 0) + 1
        return TemplateVersion.objects.create(
            template=template,
            number=number,
            subject=subject,
            text=text,
            html=html,
            published=published,
            published_at=timezone.now() if published else None,
        )


def template_version_set_published(*, version: TemplateVersion, published: bool) -> TemplateVersion:
    version.published = published
    version.published_at = timezone.now() if published else None
    version.save(update_fields=["published", "published_at", "updated_at"])
    return version


def _format_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def render_string(source: str, variables: Variables, *, escape_html: bool) -> str:
    """Fill {{ name }} placeholders; a placeholder with no variable is an error, never blank."""

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in variables:
            raise ValidationFailed(
                f"template.variables: no value for placeholder {{{{ {name} }}}}",
                code=ErrorCode.MISSING_TEMPLATE_VARIABLE,
            )
        value = _format_value(variables[name])
        return html_lib.escape(value) if escape_html else value

    return PLACEHOLDER.sub(substitute, source)


def template_render(*, version: TemplateVersion, variables: Variables, subject: str | None = None) -> RenderedContent:
    """The content a template send stores: values are HTML-escaped in html only."""
    return RenderedContent(
        subject=render_string(subject if subject is not None else version.subject, variables, escape_html=False),
        text=render_string(version.text, variables, escape_html=False) if version.text else None,
        html=render_string(version.html, variables, escape_html=True) if version.html else None,
    )

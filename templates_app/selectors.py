from django.db.models import Q

from domains.models import Domain
from mailservice.errors import ErrorCode, ValidationFailed
from templates_app.models import PLACEHOLDER, Template, TemplateVersion


def template_version_for_send(*, domain: Domain, reference: str, version: int | None) -> TemplateVersion:
    """The published version a send uses: the one named, else the newest published one.

    Another domain's template is reported exactly like a missing one.
    """
    template = Template.objects.filter(Q(public_id=reference) | Q(slug=reference), domain=domain).first()
    if template is None:
        raise ValidationFailed(
            f"template.id: no template {reference!r} on this domain", code=ErrorCode.TEMPLATE_NOT_FOUND
        )
    published = TemplateVersion.objects.filter(template=template, published=True)
    if version is not None:
        found = published.filter(number=version).first()
        if found is None:
            raise ValidationFailed(
                f"template.version: template {reference!r} has no published version {version}",
                code=ErrorCode.TEMPLATE_NOT_FOUND,
            )
        return found
    newest = published.order_by("-number").first()
    if newest is None:
        raise ValidationFailed(
            f"template.id: template {reference!r} has no published version", code=ErrorCode.TEMPLATE_NOT_FOUND
        )
    return newest


def sample_variables(*, version: TemplateVersion) -> dict[str, str]:
    """A value for every placeholder the version uses, so a preview renders before real data exists."""
    sources = (version.subject, version.text, version.html)
    return {name: f"[{name}]" for source in sources for name in PLACEHOLDER.findall(source)}

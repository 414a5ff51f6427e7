import re

from django.core.validators import RegexValidator
from django.db import models

from domains.models import Domain
from mailservice.ids import public_id

# As in the spec (ECMA-262): `\Z`, because Python's `$` would also match before a final newline.
SLUG_PATTERN = r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,99}\Z"
# A variable in a template's subject or body: {{ name }}.
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z][A-Za-z0-9_]{0,49})\s*\}\}")


def _template_public_id() -> str:
    return public_id("tpl")


class Template(models.Model):
    """A domain's template, addressed in sends by its public id or its slug."""

    public_id = models.CharField(max_length=40, unique=True, default=_template_public_id, editable=False)
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="templates")
    slug = models.CharField(
        max_length=100,
        validators=[
            RegexValidator(SLUG_PATTERN),
            RegexValidator(r"^tpl_", inverse_match=True, message="Slugs may not start with tpl_"),
        ],
        help_text="Used as template.id in sends, like the public id",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [models.UniqueConstraint(fields=["domain", "slug"], name="template_slug_unique_per_domain")]

    def __str__(self) -> str:
        return f"{self.slug} ({self.domain})"


class TemplateVersion(models.Model):
    template = models.ForeignKey(Template, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    subject = models.CharField(max_length=1000)
    text = models.TextField(blank=True)
    html = models.TextField(blank=True)
    published = models.BooleanField(default=False, help_text="Only published versions can be sent")
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["template", "-number"]
        constraints = [
            models.UniqueConstraint(fields=["template", "number"], name="template_version_number_unique"),
            models.CheckConstraint(condition=models.Q(number__gte=1), name="template_version_number_positive"),
        ]
        indexes = [
            # "newest published version of a template", the default when a send names no version
            models.Index(
                fields=["template", "-number"], condition=models.Q(published=True), name="tplversion_published_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.template.slug} v{self.number}"

from functools import cache

import factory
from factory.django import DjangoModelFactory

from apikeys.models import ApiKey, Permission
from apikeys.services import apikey_create
from domains.models import Domain
from domains.services import dkim_key_pair
from messaging.models import Direction, Message, Status
from templates_app.models import Template, TemplateVersion


@cache
def _shared_dkim_key_pair() -> tuple[str, str]:
    """RSA generation is slow; test domains share one real key pair."""
    return dkim_key_pair()


class DomainFactory(DjangoModelFactory):
    class Meta:
        model = Domain

    name = factory.Sequence(lambda n: f"sender{n}.example.com")
    verified = True
    dkim_private_key = factory.LazyFunction(lambda: _shared_dkim_key_pair()[0])
    dkim_public_key = factory.LazyFunction(lambda: _shared_dkim_key_pair()[1])


class ApiKeyFactory(DjangoModelFactory):
    """Creates keys through the real service; the instance carries `.secret` (the bearer key)."""

    class Meta:
        model = ApiKey

    domain = factory.SubFactory(DomainFactory)
    name = "test key"
    permissions = (Permission.SEND, Permission.READ)

    @classmethod
    def _create(cls, model_class: type[ApiKey], *, domain: Domain, name: str, permissions: tuple[str, ...]) -> ApiKey:
        created = apikey_create(domain=domain, permissions=list(permissions), name=name)
        created.api_key.secret = created.secret  # type: ignore[attr-defined]  # tests read the raw key off the model
        return created.api_key


class TemplateFactory(DjangoModelFactory):
    class Meta:
        model = Template

    domain = factory.SubFactory(DomainFactory)
    slug = factory.Sequence(lambda n: f"welcome-{n}")


class TemplateVersionFactory(DjangoModelFactory):
    class Meta:
        model = TemplateVersion

    template = factory.SubFactory(TemplateFactory)
    number = factory.Sequence(lambda n: n + 1)
    subject = "Hello {{ name }}"
    text = "Hi {{ name }}, welcome."
    html = "<p>Hi {{ name }}, welcome.</p>"
    published = True


class MessageFactory(DjangoModelFactory):
    class Meta:
        model = Message

    domain = factory.SubFactory(DomainFactory)
    direction = Direction.SENT
    status = Status.ACCEPTED
    from_address = factory.LazyAttribute(lambda m: f"sender@{m.domain.name}")
    to = factory.LazyFunction(lambda: ["rcpt@example.org"])
    subject = factory.Sequence(lambda n: f"Message {n}")
    text = "Plain body"

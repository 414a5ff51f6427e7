from collections.abc import Callable
from functools import cache

import factory
from factory.django import DjangoModelFactory

from apikeys.models import ApiKey, Permission
from apikeys.services import apikey_create
from domains.models import DkimKey, DkimKeyState, Domain
from domains.services import FIRST_DKIM_SELECTOR, dkim_key_pair
from mailservice.encryption import encrypt_secret
from messaging.models import Direction, EventType, Message, MessageEvent, Status, Suppression, SuppressionReason
from templates_app.models import Template, TemplateVersion


@cache
def _shared_dkim_key_pair() -> tuple[str, str]:
    """RSA generation is slow; test domains share one real key pair."""
    return dkim_key_pair()


class DomainFactory(DjangoModelFactory):
    class Meta:
        model = Domain
        skip_postgeneration_save = True

    name = factory.Sequence(lambda n: f"sender{n}.example.com")
    verified = True
    dkim_key = factory.RelatedFactory(
        "tests.factories.DkimKeyFactory", factory_related_name="domain", selector=FIRST_DKIM_SELECTOR
    )


class DkimKeyFactory(DjangoModelFactory):
    """A domain's active key (the shared pair), stored encrypted as the services store it."""

    class Meta:
        model = DkimKey

    domain = factory.SubFactory(DomainFactory, dkim_key=None)
    selector = factory.Sequence(lambda n: f"key{n}")
    state = DkimKeyState.ACTIVE
    private_key = factory.LazyFunction(lambda: encrypt_secret(_shared_dkim_key_pair()[0]))
    public_key = factory.LazyFunction(lambda: _shared_dkim_key_pair()[1])


def dkim_dnsfunc(domain: Domain) -> Callable[..., bytes | None]:
    """A dkimpy `dnsfunc` that answers with the DKIM records of the domain's current keys."""
    records = {
        f"{key.selector}._domainkey.{domain.name}.".encode(): f"v=DKIM1; k=rsa; p={key.public_key}".encode()
        for key in domain.dkim_keys.all()
    }
    return lambda name, timeout=5: records.get(name)


class ApiKeyFactory(DjangoModelFactory):
    """Creates keys through the real service; the instance carries `.secret` (the bearer key)."""

    class Meta:
        model = ApiKey

    domain = factory.SubFactory(DomainFactory)
    name = "test key"
    permissions = (Permission.SEND, Permission.READ)
    is_test = False

    @classmethod
    def _create(
        cls, model_class: type[ApiKey], *, domain: Domain, name: str, permissions: tuple[str, ...], is_test: bool
    ) -> ApiKey:
        created = apikey_create(domain=domain, permissions=list(permissions), name=name, is_test=is_test)
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


class MessageEventFactory(DjangoModelFactory):
    """An event of a message; its domain and side are the message's (MessageEvent.save)."""

    class Meta:
        model = MessageEvent

    message = factory.SubFactory(MessageFactory)
    type = EventType.DELIVERED
    recipient = "rcpt@example.org"


class SuppressionFactory(DjangoModelFactory):
    class Meta:
        model = Suppression

    domain = factory.SubFactory(DomainFactory)
    address = factory.Sequence(lambda n: f"gone{n}@example.org")
    reason = SuppressionReason.BOUNCE

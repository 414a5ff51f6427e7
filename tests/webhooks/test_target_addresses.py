"""Where a webhook may go: IPv6 forms that carry a private IPv4 address, loopback names and legacy
numeric hosts are refused when the URL is configured and when a request is made."""

from pathlib import Path

import pytest

from mailservice.errors import ValidationFailed
from messaging.models import MessageEvent
from tests.factories import MessageFactory
from webhooks import services
from webhooks.models import WebhookDelivery
from webhooks.targets import target_resolve
from webhooks.tasks import pump_task

pytestmark = pytest.mark.django_db

# Each carries 127.0.0.1 or 10.0.0.1: the translator or the host's stack sends the request there.
EMBEDDING_PRIVATE_IPV4 = [
    "::ffff:127.0.0.1",  # IPv4-mapped
    "::ffff:a00:1",
    "::127.0.0.1",  # IPv4-compatible
    "::a00:1",
    "64:ff9b::7f00:1",  # NAT64
    "64:ff9b::a00:1",
    "64:ff9b:1::808:808",  # NAT64 local-use: the operator's own translator, whatever it embeds
    "2002:7f00:1::1",  # 6to4
    "2002:a00:1::1",
    "2001:0:4136:e378:8000:63bf:80ff:fffe",  # Teredo, client 127.0.0.1
]


@pytest.fixture
def private_refused(settings):
    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = False
    return settings


@pytest.mark.parametrize("address", EMBEDDING_PRIVATE_IPV4)
def test_ipv6_carrying_a_private_ipv4_is_refused_at_configuration(domain, private_refused, address):
    with pytest.raises(ValidationFailed, match="private or loopback"):
        services.endpoint_create(domain=domain, url=f"http://[{address}]:8080/hook", event_types=[])


@pytest.mark.parametrize("address", EMBEDDING_PRIVATE_IPV4)
def test_ipv6_carrying_a_private_ipv4_is_refused_at_request_time(domain, settings, address):
    # Configured while private targets were allowed (or before this check existed).
    services.endpoint_create(domain=domain, url=f"http://[{address}]:8080/hook", event_types=[])
    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = False
    MessageEvent.objects.create(message=MessageFactory(domain=domain), type="delivered")

    pump_task()

    delivery = WebhookDelivery.objects.get()
    assert delivery.last_error.startswith("refused:") and delivery.last_status_code is None


@pytest.mark.parametrize("address", ["::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2606:4700::1111"])
def test_ipv6_carrying_a_public_ipv4_or_none_is_accepted(domain, private_refused, address):
    services.endpoint_create(domain=domain, url=f"https://[{address}]/hook", event_types=[])
    assert target_resolve(f"https://[{address}]/hook").host == f"[{address}]"


@pytest.mark.parametrize(
    "host", ["localhost", "localhost.", "app.localhost", "127.1", "0x7f000001", "2130706433", "0177.0.0.1", "10.1"]
)
def test_loopback_names_and_legacy_numeric_hosts_are_refused_at_creation(domain, private_refused, host):
    with pytest.raises(ValidationFailed):
        services.endpoint_create(domain=domain, url=f"http://{host}:8080/hook", event_types=[])


def test_a_name_resolving_to_loopback_is_refused_at_creation(domain, private_refused):
    # A name other than localhost that /etc/hosts points at loopback, as most machines have one.
    names = [
        name
        for line in Path("/etc/hosts").read_text().splitlines()
        if line.startswith("127.")
        for name in line.split("#")[0].split()[1:]
        if "localhost" not in name
    ]
    if not names:
        pytest.skip("no name other than localhost resolves to loopback here")
    with pytest.raises(ValidationFailed, match="resolves to a private or loopback address"):
        services.endpoint_create(domain=domain, url=f"https://{names[0]}/hook", event_types=[])


def test_a_name_that_does_not_resolve_is_refused_at_creation(domain, private_refused):
    with pytest.raises(ValidationFailed, match="cannot resolve"):
        services.endpoint_create(domain=domain, url="https://hooks.example.invalid/x", event_types=[])

"""Direct delivery's source addresses: each MX connection binds to an address of its domain's pool and
gives that address's EHLO name; warm-up caps per destination send the overflow through the pool's warm
addresses, or hold the message without using an attempt. Receivers on 127.0.0.2 record the peer address
and EHLO name of each message; the sources are 127.0.0.5 and 127.0.0.6."""

from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.urls import reverse
from django.utils import timezone

from config.env import env_source_addresses
from domains.models import Domain, SourceAddress, SourcePool
from messaging.models import EventType, Message, Status
from messaging.outbound.direct import sources
from messaging.outbound.direct.sources import KEY_PREFIX, today
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.fleet_limits import shared_redis
from messaging.outbound.smtp_client import helo_name
from tests.dns_server import Zone, dns_server
from tests.factories import DomainFactory, MessageFactory
from tests.harness import SmtpSink, free_port, smtp_sink

# Transactional: direct delivery sends from lanes (threads) whose own connection marks an address's warm-up start.
pytestmark = pytest.mark.django_db(transaction=True)

SOURCES = {"127.0.0.5": "out-5.sender.test", "127.0.0.6": ""}


@pytest.fixture(autouse=True)
def _fresh_counts(monkeypatch) -> Iterator[None]:
    """The warm-up counts live in Redis (or in-process) by day: none left from another test."""
    monkeypatch.setattr(sources, "_local", sources._LocalCounts())

    def clear() -> None:
        client = shared_redis()
        keys = list(client.scan_iter(f"{KEY_PREFIX}:*"))
        if keys:
            client.delete(*keys)

    clear()
    yield
    clear()


@pytest.fixture
def zone(settings) -> Iterator[Zone]:
    """A real DNS server: example.test's one MX host is 127.0.0.2."""
    settings.EMAIL_URL = "mx://"
    settings.MAILSERVICE_SMTP_TIMEOUT = 5.0
    settings.MAILSERVICE_DNS_TIMEOUT = 2.0
    settings.MAILSERVICE_SOURCE_ADDRESSES = SOURCES
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        zone.publish_mx("example.test", "mx.example.test", 10)
        zone.publish_address("mx.example.test", "127.0.0.2")
        yield zone


@pytest.fixture
def receiver(zone, settings) -> Iterator[SmtpSink]:
    settings.MAILSERVICE_MX_PORT = free_port()
    with smtp_sink(host="127.0.0.2", port=settings.MAILSERVICE_MX_PORT) as sink:
        yield sink


@pytest.fixture
def pooled() -> Callable[..., Domain]:
    """A sending domain assigned to a pool of the given addresses."""

    def make(*addresses: str) -> Domain:
        pool = SourcePool.objects.create(name="pool-" + "-".join(addresses), addresses=list(addresses))
        return DomainFactory(source_pool=pool)

    return make


def dispatched(domain: Domain, recipient: str = "bob@example.test") -> Message:
    message = MessageFactory(domain=domain, to=[recipient], next_attempt_at=timezone.now() - timedelta(seconds=1))
    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    return message


@pytest.mark.parametrize("source", list(SOURCES))
def test_the_receiver_sees_the_pools_source_address_and_its_helo_name(receiver, pooled, source):
    domain = pooled(source)

    for _ in range(2):  # the second reuses nothing of the first batch: each batch binds again
        assert dispatched(domain).status == Status.DELIVERED

    assert [(received.peer[0], received.helo) for received in receiver.received] == [
        (source, SOURCES[source] or helo_name())
    ] * 2


def test_a_domain_without_a_pool_leaves_from_every_address(receiver):
    domain = DomainFactory()

    for _ in range(12):  # all 12 from one of two addresses: a chance of 1 in 2^11
        assert dispatched(domain).status == Status.DELIVERED

    assert {received.peer[0] for received in receiver.received} == set(SOURCES)


@pytest.mark.parametrize("counted_in", ["Redis", "the process"])
def test_warmup_overflow_leaves_from_the_pools_warm_address(receiver, pooled, settings, counted_in):
    settings.MAILSERVICE_WARMUP = 2
    if counted_in == "the process":
        settings.REDIS_URL = None
    domain = pooled("127.0.0.5", "127.0.0.6")
    SourceAddress.objects.create(address="127.0.0.6", warm=True)

    for _ in range(5):
        assert dispatched(domain).status == Status.DELIVERED

    # The warming address takes its cap (2 to this destination on its first day), the warm one the rest.
    assert [received.peer[0] for received in receiver.received] == ["127.0.0.5"] * 2 + ["127.0.0.6"] * 3
    assert SourceAddress.objects.get(address="127.0.0.5").warmup_started == today()


def test_warmup_caps_count_per_destination(zone, receiver, pooled, settings):
    """Per destination as shaping rolls it up: a domain served by another provider's MX has a cap of its own,
    one served by the same provider's MX hosts shares it."""
    settings.MAILSERVICE_WARMUP = 1
    zone.publish_mx("other.test", "mx.other.test", 10)
    zone.publish_address("mx.other.test", "127.0.0.2")
    zone.publish_mx("hosted.test", "mx2.example.test", 10)
    zone.publish_address("mx2.example.test", "127.0.0.2")
    domain = pooled("127.0.0.5")

    recipients = ("example.test", "other.test", "example.test", "hosted.test")
    sent = [dispatched(domain, f"bob@{name}").status for name in recipients]

    assert sent == [Status.DELIVERED, Status.DELIVERED, Status.ACCEPTED, Status.ACCEPTED]


def test_a_pool_of_warming_addresses_at_their_cap_holds_the_message_without_an_attempt(receiver, pooled, settings):
    settings.MAILSERVICE_WARMUP = 2
    domain = pooled("127.0.0.5")
    SourceAddress.objects.create(address="127.0.0.5", warmup_started=today() - timedelta(days=1))  # day 2: cap 4

    statuses = [dispatched(domain).status for _ in range(4)]
    held = dispatched(domain)

    assert statuses == [Status.DELIVERED] * 4
    assert len(receiver.received) == 4
    assert (held.status, held.attempts) == (Status.ACCEPTED, 0)
    assert held.next_attempt_at > timezone.now()
    event = held.events.get()
    assert event.type == EventType.HELD
    assert event.detail.startswith(
        "not sent, no attempt used: every address of pool pool-127.0.0.5 is at its warm-up cap for example.test;"
    )


def test_an_address_past_the_ceiling_is_warm(receiver, pooled, settings):
    settings.MAILSERVICE_WARMUP = 1
    settings.MAILSERVICE_WARMUP_CEILING = 4
    domain = pooled("127.0.0.5")
    SourceAddress.objects.create(address="127.0.0.5", warmup_started=today() - timedelta(days=3))  # cap 8 > 4

    assert [dispatched(domain).status for _ in range(3)] == [Status.DELIVERED] * 3


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("127.0.0.5=out.example,nonsense", "'nonsense' is not an IPv4 or IPv6 address"),
        ("127.0.0.5=bad_name!", "the HELO name 'bad_name!' of 127.0.0.5 is not a host name"),
        ("2001:db8::1,2001:DB8:0::1", "2001:db8::1 is given twice"),
    ],
)
def test_a_malformed_source_address_list_stops_start_up(monkeypatch, value, error):
    monkeypatch.setenv("MAILSERVICE_SOURCE_ADDRESSES", value)

    with pytest.raises(ImproperlyConfigured, match=error):
        env_source_addresses("MAILSERVICE_SOURCE_ADDRESSES")


def test_source_addresses_parse_with_and_without_helo(monkeypatch):
    monkeypatch.setenv("MAILSERVICE_SOURCE_ADDRESSES", " 192.0.2.7 = mta1.example.com , [2001:DB8::7]")

    assert env_source_addresses("MAILSERVICE_SOURCE_ADDRESSES") == {"192.0.2.7": "mta1.example.com", "2001:db8::7": ""}


def test_the_console_lists_every_source_address_with_pool_helo_warmup_and_todays_count(
    receiver, pooled, settings, admin_client, django_assert_max_num_queries
):
    settings.MAILSERVICE_WARMUP = 50
    domain = pooled("127.0.0.5")
    SourceAddress.objects.create(address="127.0.0.6", warm=True)
    dispatched(domain)

    with django_assert_max_num_queries(12):
        page = admin_client.get(reverse("admin:domains_sourceaddress_changelist")).content.decode()

    assert "pool-127.0.0.5" in page
    assert "out-5.sender.test" in page and helo_name() in page
    assert "day 1: 50 per destination" in page
    assert '<td class="field-today">1</td>' in page
    assert '<td class="field-warmup">warm</td>' in page


def test_a_pool_is_made_of_configured_addresses_and_assigned_to_a_domain_in_the_console(settings, admin_client):
    settings.MAILSERVICE_SOURCE_ADDRESSES = SOURCES
    domain = DomainFactory()

    refused = admin_client.post(
        reverse("admin:domains_sourcepool_add"), {"name": "transactional", "addresses": ["127.0.0.9"]}
    )
    admin_client.post(reverse("admin:domains_sourcepool_add"), {"name": "transactional", "addresses": ["127.0.0.6"]})
    pool = SourcePool.objects.get()
    admin_client.post(
        reverse("admin:domains_domain_change", args=[domain.pk]),
        {"daily_allowance": "", "dispatch_weight": "1", "source_pool": pool.pk},
    )

    assert "127.0.0.9 is not one of the available choices" in refused.content.decode()
    assert pool.addresses == ["127.0.0.6"]
    domain.refresh_from_db()
    assert domain.source_pool == pool

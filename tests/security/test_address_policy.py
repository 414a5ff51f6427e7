"""One address policy for every outbound connection (issue 41, item 5): webhooks, MX hosts, MTA-STS policy
hosts and TLS-RPT `https:` endpoints refuse every address that is not globally reachable, the IPv6 forms
that carry a private IPv4 address included, each path with its own `*_ALLOW_PRIVATE` setting.

Every form goes through every path's real code, in this process, with DNS answered by a server on
loopback. No packet may leave the machine (it has an IPv6 default route, and a NAT64 or 6to4 form
would be routed out): every connect outside loopback is refused in this process before it is made
and recorded, so a test sees whether a path decided to connect, never a connection."""

import ipaddress
import socket
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from mailservice.addresses import may_connect
from messaging.models import MessageEvent
from messaging.outbound.direct.transport import MxTransport
from messaging.outbound.envelope import Envelope
from messaging.tls_reports.counts import record_tls_outcome
from messaging.tls_reports.sending import tls_reports_send
from tests.dns_server import Zone, dns_server
from tests.factories import DomainFactory, MessageFactory
from webhooks import services
from webhooks.models import WebhookDelivery
from webhooks.tasks import pump_task

pytestmark = pytest.mark.django_db

REFUSED = {
    "IPv4-mapped loopback": "::ffff:127.0.0.1",
    "IPv4-mapped private": "::ffff:10.0.0.1",
    "IPv4-compatible loopback": "::127.0.0.1",
    "IPv4-compatible private": "::10.0.0.1",
    "NAT64 loopback": "64:ff9b::7f00:1",
    "NAT64 private": "64:ff9b::a00:1",
    "NAT64 cloud metadata": "64:ff9b::a9fe:a9fe",
    "NAT64 local-use, carrying a public IPv4": "64:ff9b:1::808:808",
    "6to4 loopback": "2002:7f00:1::1",
    "6to4 private": "2002:c0a8:101::1",
    "Teredo": "2001:0:4136:e378:8000:63bf:3fff:fdd2",
    "IPv6 loopback": "::1",
    "IPv6 unspecified": "::",
    "IPv6 unique local": "fd00::1",
    "IPv6 link-local": "fe80::1",
    "IPv6 multicast": "ff0e::1",
    "IPv6 documentation": "2001:db8::1",
    "IPv4 loopback": "127.0.0.1",
    "IPv4 private": "10.0.0.1",
    "IPv4 cloud metadata": "169.254.169.254",
    "IPv4 shared (CGNAT)": "100.64.0.1",
    "IPv4 multicast": "224.0.0.1",
}
ALLOWED = {
    "global IPv6": "2606:4700::1111",
    "NAT64 of a public IPv4": "64:ff9b::808:808",
    "6to4 of a public IPv4": "2002:808:808::1",
    "global IPv4": "8.8.8.8",
}


@pytest.mark.parametrize("address", REFUSED.values(), ids=REFUSED.keys())
def test_the_policy_refuses_every_address_that_is_not_globally_reachable(address):
    assert not may_connect(address, allow_private=False)
    assert may_connect(address, allow_private=True)


@pytest.mark.parametrize("address", ALLOWED.values(), ids=ALLOWED.keys())
def test_the_policy_allows_global_addresses_and_forms_carrying_one(address):
    assert may_connect(address, allow_private=False)


@pytest.fixture
def attempted(monkeypatch) -> list[str]:
    """The addresses outside loopback this process tried to connect to; each connect is refused before
    it is made, so no packet leaves the machine whatever a path decides."""
    tried: list[str] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def outside_loopback(sock: socket.socket, address: object) -> bool:
        if sock.family not in (socket.AF_INET, socket.AF_INET6):
            return False
        host = str(address[0])  # type: ignore[index]
        try:
            ip = ipaddress.ip_address(host.partition("%")[0])
        except ValueError:
            tried.append(host)
            return True
        if not ip.is_loopback:
            tried.append(str(ip))
        return not ip.is_loopback

    def connect(sock: socket.socket, address: object) -> None:
        if outside_loopback(sock, address):
            raise ConnectionRefusedError("the test refuses connections outside loopback")
        real_connect(sock, address)  # type: ignore[arg-type]

    def connect_ex(sock: socket.socket, address: object) -> int:
        if outside_loopback(sock, address):
            return 111  # ECONNREFUSED
        return real_connect_ex(sock, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    return tried


def published(zone: Zone, name: str, address: str) -> None:
    """An A or AAAA record of the address, an AAAA one in eight hex groups (dnslib reads no dotted tail)."""
    ip = ipaddress.ip_address(address)
    packed = ip.packed
    groups = ":".join(f"{packed[i] << 8 | packed[i + 1]:x}" for i in range(0, 16, 2)) if ip.version == 6 else address
    zone.publish_address(name, groups)


@pytest.fixture
def zone(settings) -> Iterator[Zone]:
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        settings.MAILSERVICE_DNS_TIMEOUT = 2.0
        settings.MAILSERVICE_SMTP_TIMEOUT = 2.0
        settings.EMAIL_URL = "mx://"
        yield zone


def webhook(zone: Zone, settings, address: str, allow_private: bool, tried: list[str]) -> str:
    """A webhook request to a URL on the address; the refusal the delivery records, or ''."""
    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = True  # configured before the address was refused
    literal = f"[{address}]" if ":" in address else address
    domain = DomainFactory()
    services.endpoint_create(domain=domain, url=f"https://{literal}/hook", event_types=[])
    settings.MAILSERVICE_WEBHOOK_ALLOW_PRIVATE = allow_private
    MessageEvent.objects.create(message=MessageFactory(domain=domain), type="delivered")
    pump_task()
    error = WebhookDelivery.objects.get().last_error
    return error if error.startswith("refused:") else ""


def mx_host(zone: Zone, settings, address: str, allow_private: bool, tried: list[str]) -> str:
    """Direct delivery to a domain whose one MX host has the address; the refusal, or ''."""
    settings.MAILSERVICE_MX_ALLOW_PRIVATE = allow_private
    zone.publish_mx("target.test", "mx.target.test")
    published(zone, "mx.target.test", address)
    with MxTransport().connection() as connection:
        envelope = Envelope(mail_from="sender@acme.test", recipients=["bob@target.test"], smtputf8=False)
        result = connection.send(envelope=envelope, data=b"Subject: hi\r\n\r\nhello\r\n", name="m")
    text = result.final.text
    return text if "MAILSERVICE_MX_ALLOW_PRIVATE is off" in text else ""


def mta_sts_host(zone: Zone, settings, address: str, allow_private: bool, tried: list[str]) -> str:
    """Direct delivery to a domain publishing MTA-STS, its policy host on the address (its MX on a global
    one); 'refused' when the policy was not fetched from the address, else ''."""
    settings.MAILSERVICE_MX_ALLOW_PRIVATE = allow_private
    zone.publish_txt("_mta-sts.target.test", "v=STSv1; id=1")
    published(zone, "mta-sts.target.test", address)
    mx_host(zone, settings, "2606:4700::53", allow_private, tried)
    return "" if str(ipaddress.ip_address(address)) in tried else "refused"


def tls_rpt_endpoint(zone: Zone, settings, address: str, allow_private: bool, tried: list[str]) -> str:
    """Today's TLS report for a policy domain whose `rua` is an https: URL on a host with the address; the
    refusal, or ''."""
    settings.MAILSERVICE_MX_ALLOW_PRIVATE = allow_private
    settings.MAILSERVICE_TLSRPT_FROM = "tls-reports@acme.test"
    DomainFactory(name="acme.test")
    record_tls_outcome(
        policy_domain="target.test", policy_type="no-policy-found", policy_strings=[], mx_host="", receiving_ip=""
    )
    zone.publish_txt("_smtp._tls.target.test", "v=TLSRPTv1; rua=https://reports.target.test/tlsrpt")
    published(zone, "reports.target.test", address)
    [sent] = tls_reports_send(day=datetime.now(UTC).date()) or []
    return sent.outcome if "MAILSERVICE_MX_ALLOW_PRIVATE is off" in sent.outcome else ""


PATHS: dict[str, Callable[..., str]] = {
    "webhook": webhook,
    "MX host": mx_host,
    "MTA-STS policy host": mta_sts_host,
    "TLS-RPT https endpoint": tls_rpt_endpoint,
}


@pytest.fixture
def outcome(zone, settings, attempted) -> Callable[[Callable[..., str], str, bool], tuple[str, list[str]]]:
    """Run a path to an address: (its refusal or '', the addresses outside loopback it tried to connect to)."""

    def run(path: Callable[..., str], address: str, allow_private: bool) -> tuple[str, list[str]]:
        return path(zone, settings, address, allow_private, attempted), attempted

    return run


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("address", REFUSED.values(), ids=REFUSED.keys())
def test_each_path_refuses_each_form_before_connecting(outcome, path, address):
    refusal, tried = outcome(path, address, False)

    assert refusal
    assert str(ipaddress.ip_address(address)) not in tried


@pytest.mark.parametrize("path", PATHS.values(), ids=PATHS.keys())
@pytest.mark.parametrize("address", ["::ffff:127.0.0.1", "64:ff9b::a00:1", "2606:4700::1111"])
def test_each_path_connects_where_its_setting_or_the_address_allows(outcome, path, address):
    allow_private = not may_connect(address, allow_private=False)

    refusal, tried = outcome(path, address, allow_private)

    assert not refusal
    assert str(ipaddress.ip_address(address)) in tried

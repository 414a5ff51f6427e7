"""Fixtures of the direct-delivery tests (test_mx_delivery.py, test_mx_tls_policy.py): a DNS server the
test publishes records on, and SMTP receivers on loopback addresses sharing MAILSERVICE_MX_PORT."""

import ssl
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tests.dns_server import Zone, dns_server
from tests.harness import SmtpSink, free_port, smtp_sink


@pytest.fixture
def zone(settings) -> Iterator[Zone]:
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        settings.MAILSERVICE_DNS_TIMEOUT = 2.0
        settings.EMAIL_URL = "mx://"
        settings.MAILSERVICE_SMTP_TIMEOUT = 5.0
        yield zone


@pytest.fixture
def mx_port(settings) -> int:
    settings.MAILSERVICE_MX_PORT = free_port()
    return settings.MAILSERVICE_MX_PORT


@pytest.fixture
def receivers(mx_port) -> Iterator[Callable[..., SmtpSink]]:
    """Start a receiver on a loopback address (on the MX port): `receiver("127.0.0.2", tls=True)`."""
    with ExitStack() as stack:

        def receiver(host: str, *, tls_context: ssl.SSLContext | None = None, idle_timeout: float = 300) -> SmtpSink:
            return stack.enter_context(
                smtp_sink(host=host, port=mx_port, tls_context=tls_context, idle_timeout=idle_timeout)
            )

        yield receiver

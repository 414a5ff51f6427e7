"""A persistent database connection that PostgreSQL ended while it sat idle is replaced before a request
uses it (mailservice/postgresql: the health check looks at the socket instead of sending SELECT 1)."""

import time

import httpx
import pytest
from django.db import connection, connections

from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import web_server

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the health check of the PostgreSQL backend"),
]


def terminate_other_backends() -> int:
    """End every other connection to the test database, as a restart would; how many there were."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def terminate_backend(pid: int) -> bool:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        return cursor.fetchone()[0]


def test_an_idle_connection_is_usable_and_one_whose_backend_ended_is_not():
    other = connections.create_connection("default")
    try:
        other.ensure_connection()
        assert other.is_usable()
        # Only this connection's backend: an earlier test's server may still hold connections of its own.
        assert terminate_backend(other.connection.info.backend_pid)
        time.sleep(0.2)  # the backend's goodbye reaches the socket
        assert not other.is_usable()
    finally:
        other.close()


@pytest.mark.live
def test_sends_after_the_database_ended_every_connection_all_succeed():
    key = ApiKeyFactory(domain=DomainFactory(name="acme.example.com"))
    headers = {"Authorization": f"Bearer {key.secret}"}
    body = {"from": "hello@acme.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}
    with (
        web_server(workers=1, DATABASE_CONN_MAX_AGE="60") as base_url,
        httpx.Client(base_url=base_url, headers=headers, timeout=30) as client,
    ):

        def send_together(count: int) -> list[int]:
            requests = [client.build_request("POST", "/v1/send", json=body) for _ in range(count)]
            return [client.send(request).status_code for request in requests]

        assert set(send_together(16)) == {200}  # the server's threads hold persistent connections now
        assert terminate_other_backends() >= 1
        time.sleep(0.2)
        assert send_together(16) == [200] * 16

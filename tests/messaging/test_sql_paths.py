"""The hand-written statements (messaging/sql.py) keep the hot paths at their round trips.

The services' behaviour on both paths is tested where each service is (the `sql_path` fixture);
these pin what the statements are for: how many queries a send and an inbound store cost.
"""

import pytest
from django.db import connection

from config.env import database_from_url
from mailservice.postgresql.base import DatabaseWrapper
from messaging.inbound.services import inbound_deliver
from messaging.models import Direction, Message
from tests.factories import DomainFactory
from tests.harness import ROOT

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="the hand-written statements need PostgreSQL"),
]

SEND = {"from": "hello@acme.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}
RAW = b"From: a@example.org\r\nSubject: Hi\r\n\r\nbody\r\n"


def test_a_send_is_two_queries(api, django_assert_num_queries):
    assert api.post("/v1/send", SEND, format="json").status_code == 200  # opens the day's allowance counter

    # The key (with its domain), then the one statement: pause check, allowance count, both INSERTs.
    with django_assert_num_queries(2):
        assert api.post("/v1/send", SEND, format="json").status_code == 200


def test_storing_received_mail_for_several_domains_is_one_query(domain, django_assert_num_queries):
    DomainFactory(name="other.example.net")
    recipients = ["help@acme.example.com", "sales@acme.example.com", "info@other.example.net"]

    # The domains' check and every message and event INSERT, in one statement.
    with django_assert_num_queries(1):
        assert inbound_deliver(envelope_from="a@example.org", recipients=recipients, raw=RAW) == []
    assert Message.objects.filter(direction=Direction.RECEIVED).count() == 2


def _prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def test_a_statement_run_again_on_a_connection_is_prepared_once(api):
    """PostgreSQL parses and plans the send statement once per connection, not once per send."""
    for _ in range(4):
        assert api.post("/v1/send", SEND, format="json").status_code == 200

    sends = [statement for statement in _prepared_statements() if statement.startswith("WITH control AS")]
    assert len(sends) == 1
    assert "INSERT INTO" in sends[0]


def test_the_frameworks_own_queries_are_not_prepared(api):
    """Django binds its queries on the client: preparing them would fill each connection with statements."""
    for _ in range(4):
        assert api.get("/v1/messages").status_code == 200

    assert not [statement for statement in _prepared_statements() if "messaging_message" in statement]


@pytest.mark.parametrize(
    ("query", "threshold"), [("", 2), ("?prepare_threshold=none", None), ("?prepare_threshold=5", 5)]
)
def test_behind_a_pooler_without_prepared_statements_the_database_url_turns_them_off(query, threshold):
    settings_dict = {**connection.settings_dict, **database_from_url(f"postgres://u@db.example/mail{query}", ROOT)}

    assert DatabaseWrapper(settings_dict).get_connection_params()["prepare_threshold"] == threshold

"""A database that goes silent fails a request within seconds: libpq's timeouts, set by default on DATABASE_URL.

bench/nodes.py (tests/ops/test_nodes.py) shows it live: a node cut off from its database answers 503.
"""

import pytest

from config.env import database_from_url
from tests.harness import ROOT


@pytest.mark.parametrize(
    ("query", "connect_timeout", "tcp_user_timeout"),
    [("", "5", "10000"), ("?connect_timeout=2&tcp_user_timeout=3000", "2", "3000")],
)
def test_postgres_urls_give_up_on_a_silent_database_unless_they_say_otherwise(query, connect_timeout, tcp_user_timeout):
    options = database_from_url(f"postgres://u@db.example/mail{query}", ROOT)["OPTIONS"]

    assert (options["connect_timeout"], options["tcp_user_timeout"]) == (connect_timeout, tcp_user_timeout)

"""The chaos soak's CI variant: bench/soak.py for SOAK_CI_SECONDS (default 60) in a process of its own.

The soak brings its own PostgreSQL cluster and Redis (it restarts them), so it needs no database
from pytest-django; it runs as a separate process because it configures Django for that cluster.
"""

import os
import sys

import pytest

from tests.harness import ChildProcess

pytestmark = [pytest.mark.live, pytest.mark.soak, pytest.mark.slow]


def test_nothing_is_lost_or_duplicated_while_workers_redis_postgres_the_relay_and_web_break(tmp_path):
    seconds = os.environ.get("SOAK_CI_SECONDS", "60")
    summary = tmp_path / "soak.md"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "DJANGO_SETTINGS"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)  # never the shared services: the soak starts and restarts its own

    command = [sys.executable, "bench/soak.py", "--seconds", seconds, "--interval", "7", "--output", str(summary)]
    soak = ChildProcess(command, name="soak", env=env, wait_on_start=False)
    with soak:
        status = soak.wait(timeout=float(seconds) + 240)
        # Leaving the block stops it (SIGTERM, not kill: the soak stops its private servers on SIGTERM).
    assert status is not None, f"the soak did not finish in time:\n{soak.log_tail(60)}"

    print(soak.log_tail(100))
    assert status == 0, summary.read_text() if summary.exists() else soak.log_tail(60)
    text = summary.read_text()
    assert "Result: PASS" in text
    for event in ["SIGKILLed", "redis restarted", "postgresql restarted", "sink drops connections", "web 0 stopped"]:
        assert event in text or event.replace("web 0", "web 1") in text, f"the chaos loop never did: {event}"

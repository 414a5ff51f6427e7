"""The benchmark harness at its tiny size, so it cannot rot: every scenario runs end to end."""

import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.harness import ROOT

pytestmark = pytest.mark.live


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the benchmarks need PostgreSQL (DATABASE_URL)")
def test_every_scenario_runs_at_the_tiny_size(tmp_path):
    # Its own database next to this run's test database, so a full `make bench` can run alongside.
    database = f"test_{connection.settings_dict['NAME'].removeprefix('test_')}_bench"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "all", "--tiny", "--output", str(tmp_path), "--database", database],
        cwd=ROOT,
        env={key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "DJANGO_"))},
        capture_output=True,
        text=True,
        timeout=600,  # about 150 s in CI; a loaded shared machine has taken 320 s
    )

    assert done.returncode == 0, done.stderr[-3000:]
    results = (tmp_path / "latest.md").read_text()
    headings = (
        "## 1. Accept path",
        "## 2. Dispatch",
        "## 3. List scaling",
        "## 4. Inbound",
        "## 5. Embedded default",
        "## 6. Submission",
        "## 7. Retention purge",
        "## 8. Fairness across domains",
        "## 9. Relay rate",
        "## 10. Webhook delivery",
        "## 11. Memory over many sends",
        "## 12. Batch sending",
        "## 13. Accept path behind PgBouncer",
        "## 14. Database size per message",
    )
    for heading in headings:
        assert heading in results
    assert results.count("EXPLAIN (ANALYZE, BUFFERS) of the list query") == 4  # two pages at two sizes
    assert "product / django-post-office" in results and "run_inbound_smtp / bare aiosmtpd" in results
    assert "run_inbound_smtp / (aiosmtpd + durable commit)" in results
    assert "run_submission_smtp / bare aiosmtpd with TLS" in results and "p99 during purge / unloaded" in results
    # At this size the planner may take any plan; bench/results/retention-purge.md shows the index at 1 000 000 rows.
    assert "EXPLAIN (ANALYZE, BUFFERS) of the query that finds one purge batch" in results
    assert "single send / R1 (durable reference) throughput, 1 recipient" in results
    assert "requests/s per core" in results
    assert "single send / R0 (bare reference) throughput, 1 recipient" in results
    assert "messages/s through batches of" in results and "-message batch at 4 clients" in results
    assert "## Goals" in results and "| direct delivery / relay mode | Isolation" in results
    assert "bytes of WAL per message" in results and "transactions committed per message" in results
    assert "product / bare httpx loop, deliveries per second" in results and "(flat)" in results
    # Where the machine's CPU went, for the product and its ceilings, references or peer in scenarios 1, 2, 4, 5 and
    # 13, for the large batches in 12, and for the relay and direct runs of the isolation scenario.
    assert results.count("Where the CPU went") == 17 and "PostgreSQL" in results
    assert "Where the CPU went, direct run" in results  # what direct delivery spends beside relay mode
    assert "wrk used" in results
    assert "PgBouncer 1." in results and "server connections at once" in results
    assert "B's p99 wait, backlog" in results and "delivered` events (one each: yes)" in results
    plots = {"accept.png", "dispatch.png", "list.png", "inbound.png", "embedded.png", "submission.png"}
    plots |= {"fairness.png", "relay.png", "batch.png", "pooled.png"}
    assert {path.name for path in tmp_path.glob("*.png")} == plots

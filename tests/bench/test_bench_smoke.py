"""The benchmark harness at its tiny size, so it cannot rot: every scenario runs end to end.

Each scenario is a test of its own (`python -m bench SCENARIO --tiny`, what `make bench-smoke` runs for all of
them at once), in an xdist group of its own, so a parallel run spreads the 15 scenarios (about 200 s in all)
over its workers. Each checks what its section of the results shows; `count` where the number matters.
"""

import os
import subprocess
import sys

import pytest
from django.db import connection

from tests.harness import ROOT

pytestmark = [pytest.mark.live, pytest.mark.slow]

# scenario: (its heading, what its section shows: text -> how often, or None for at least once, its plot)
EXPECTED: dict[str, tuple[str, dict[str, int | None], str | None]] = {
    "accept": (
        "## 1. Accept path",
        {
            "single send / R1 (durable reference) throughput, 1 recipient": None,
            "single send / R0 (bare reference) throughput, 1 recipient": None,
            "requests/s per core": None,
            "Where the CPU went": 3,
            "wrk used": None,
        },
        "accept.png",
    ),
    "dispatch": ("## 2. Dispatch", {"product / django-post-office": None, "Where the CPU went": 2}, "dispatch.png"),
    # Two pages at two sizes.
    "list": ("## 3. List scaling", {"EXPLAIN (ANALYZE, BUFFERS) of the list query": 4}, "list.png"),
    "inbound": (
        "## 4. Inbound",
        {
            "run_inbound_smtp / bare aiosmtpd": None,
            "run_inbound_smtp / (aiosmtpd + durable commit)": None,
            "Where the CPU went": 3,
        },
        "inbound.png",
    ),
    "embedded": ("## 5. Embedded default", {"Where the CPU went": 3}, "embedded.png"),
    "submission": ("## 6. Submission", {"run_submission_smtp / bare aiosmtpd with TLS": None}, "submission.png"),
    "purge": (
        "## 7. Retention purge",
        {
            "p99 during purge / unloaded": None,
            # At this size the planner may take any plan; bench/results/retention-purge.md shows the index at
            # 1 000 000 rows.
            "EXPLAIN (ANALYZE, BUFFERS) of the query that finds one purge batch": None,
        },
        None,
    ),
    "fairness": ("## 8. Fairness across domains", {"B's p99 wait, backlog": None, "(flat)": None}, "fairness.png"),
    "relay": ("## 9. Relay rate", {"delivered` events (one each: yes)": None}, "relay.png"),
    # What direct delivery spends beside relay mode.
    "isolation": (
        "## Isolation: direct delivery and slow destinations",
        {
            "## Goals": None,
            "| direct delivery / relay mode | Isolation": None,
            "Where the CPU went": 2,
            "Where the CPU went, direct run": 1,
            "## Direct delivery to a throttling receiver": 1,
            "| connections / the least the limits allow |": None,
            "| deferred events (email.delayed at most) per message |": None,
        },
        None,
    ),
    "webhooks": ("## 10. Webhook delivery", {"product / bare httpx loop, deliveries per second": None}, None),
    "memory": ("## 11. Memory over many sends", {"(flat)": None}, None),
    "batch": (
        "## 12. Batch sending",
        {"messages/s through batches of": None, "-message batch at 4 clients": None, "Where the CPU went": 1},
        "batch.png",
    ),
    "pooled": (
        "## 13. Accept path behind PgBouncer",
        {"PgBouncer 1.": None, "server connections at once": None, "Where the CPU went": 3},
        "pooled.png",
    ),
    "sizing": (
        "## 14. Database size per message",
        {"bytes of WAL per message": None, "transactions committed per message": None},
        None,
    ),
    # Two lists at two sizes: the suppressions' first page and a page of events halfway down, each EXPLAINed.
    "app_view": (
        "## 15. The application's view: suppressions and events",
        {"EXPLAIN (ANALYZE, BUFFERS) of the": 4, "events, a page halfway down the cursor chain": None},
        None,
    ),
}


def test_every_scenario_is_checked():
    from bench.scenarios import SCENARIOS

    assert set(EXPECTED) == set(SCENARIOS)
    # Where the machine's CPU went, for the product and its ceilings, references or peer in scenarios 1, 2, 4, 5
    # and 13, for the large batches in 12, and for the relay and direct runs of the isolation scenario.
    assert sum(shows.get("Where the CPU went") or 0 for _, shows, _ in EXPECTED.values()) == 17


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the benchmarks need PostgreSQL (DATABASE_URL)")
@pytest.mark.parametrize(
    "scenario", [pytest.param(name, marks=pytest.mark.xdist_group(f"bench {name}")) for name in EXPECTED]
)
def test_the_scenario_runs_at_the_tiny_size(scenario, tmp_path):
    # Its own database next to this run's test database, so a full `make bench` can run alongside.
    database = f"test_{connection.settings_dict['NAME'].removeprefix('test_')}_bench_{scenario}"
    done = subprocess.run(
        [sys.executable, "-m", "bench", scenario, "--tiny", "--output", str(tmp_path), "--database", database],
        cwd=ROOT,
        env={key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "DJANGO_"))},
        capture_output=True,
        text=True,
        timeout=300,  # at most 31 s alone on 2 cores (embedded, relay); a loaded machine takes several times that
    )

    assert done.returncode == 0, done.stderr[-3000:]
    results = (tmp_path / "latest.md").read_text()
    heading, shows, plot = EXPECTED[scenario]
    assert heading in results and "PostgreSQL" in results
    for text, count in shows.items():
        assert results.count(text) == count if count is not None else text in results, text
    assert {path.name for path in tmp_path.glob("*.png")} == ({plot} if plot else set())

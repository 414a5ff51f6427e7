"""Nodes apart, the CI variant: bench/nodes.py for NODES_CI_SECONDS (default 75, its faults shortened to
match: app1 cut off for about 7 s) in a process of its own.

It builds its own network namespaces, PostgreSQL cluster and Redis on the database node, so it needs no
database from pytest-django; it runs as a separate process because it configures Django for that cluster
and moves its own threads into a namespace. It needs root, iproute2 and iptables (CI has them: there it must run).
"""

import os
import shutil
import sys

import pytest

from tests.harness import ChildProcess

pytestmark = [pytest.mark.live, pytest.mark.namespaces, pytest.mark.slow]


@pytest.fixture
def namespaces_allowed() -> None:
    tools = [tool for tool in ("ip", "iptables") if not shutil.which(tool)]
    missing = "not root" if os.geteuid() != 0 else f"missing: {', '.join(tools)}" if tools else ""
    if missing:
        message = f"network namespaces need root, iproute2 and iptables ({missing}; make system-packages)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_every_accepted_message_is_delivered_once_while_nodes_are_cut_slowed_killed_and_restarted(
    tmp_path, namespaces_allowed
):
    seconds = os.environ.get("NODES_CI_SECONDS", "75")
    summary = tmp_path / "nodes.md"
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTEST_", "DJANGO_SETTINGS"))}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)  # never the shared services: the database node runs its own

    command = [sys.executable, "bench/nodes.py", "--seconds", seconds, "--output", str(summary)]
    nodes = ChildProcess(command, name="nodes", env=env, wait_on_start=False)
    with nodes:
        status = nodes.wait(timeout=float(seconds) + 300)
        # Leaving the block stops it (SIGTERM: it stops its processes and deletes its namespaces).
    assert status is not None, f"the nodes test did not finish in time:\n{nodes.log_tail(60)}"

    print(nodes.log_tail(100))
    assert status == 0, summary.read_text() if summary.exists() else nodes.log_tail(60)
    text = summary.read_text()
    assert "Result: PASS" in text
    faults = ["cut app1 from the database", "latency and loss on app2", "SIGKILL app3's worker in DATA"]
    for fault in [*faults, "restart PostgreSQL"]:
        assert f"{fault}: over" in text, f"the fault never ran to its end: {fault}"

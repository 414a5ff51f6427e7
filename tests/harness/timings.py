"""`pytest --fixture-timings=FILE`: where the suite's time goes, grouped by fixture.

Each fixture's set-up time is summed over the run (a module- or session-scoped fixture counts once per
set-up), beside the tests' own call time, and written as JSON: docs/development.md's table is made from it
by `python -m tests.harness.timings FILE`. Under pytest-xdist each worker writes FILE.<worker>.
"""

import json
import os
import resource
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_fixtures: dict[str, list[float]] = defaultdict(list)
_calls: dict[str, float] = {}
_cpu: dict[str, float] = {}  # CPU seconds of a test (set-up to teardown), its reaped child processes included


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fixture-timings", metavar="FILE", help="write the set-up time of each fixture as JSON")


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest) -> Iterator[None]:
    started = time.monotonic()
    yield
    _fixtures[f"{fixturedef.argname} ({fixturedef.scope})"].append(time.monotonic() - started)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started = _cpu_seconds()
    yield
    _cpu[item.nodeid] = _cpu_seconds() - started


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call":
        _calls[report.nodeid] = report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = session.config.getoption("--fixture-timings")
    if not path:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    target = Path(f"{path}.{worker}" if worker else path)
    target.write_text(json.dumps({"fixtures": _fixtures, "calls": _calls, "cpu": _cpu}))


def table(paths: list[Path], rows: int = 25) -> str:
    """Markdown: the fixtures and test files that cost most, summed over the given timing files."""
    fixtures: dict[str, list[float]] = defaultdict(list)
    calls_by_file: dict[str, float] = defaultdict(float)
    cpu_by_file: dict[str, float] = defaultdict(float)
    for path in paths:
        data = json.loads(path.read_text())
        for name, times in data["fixtures"].items():
            fixtures[name].extend(times)
        for nodeid, seconds in data["calls"].items():
            calls_by_file[nodeid.split("::")[0]] += seconds
        for nodeid, seconds in data.get("cpu", {}).items():
            cpu_by_file[nodeid.split("::")[0]] += seconds
    lines = ["| fixture (scope) | set-ups | seconds |", "|---|---:|---:|"]
    for name, times in sorted(fixtures.items(), key=lambda item: -sum(item[1]))[:rows]:
        lines.append(f"| `{name}` | {len(times)} | {sum(times):.1f} |")
    lines += ["", "| test file | the tests' own time (call), s | CPU, its processes included, s |", "|---|---:|---:|"]
    for name, seconds in sorted(calls_by_file.items(), key=lambda item: -item[1])[:rows]:
        lines.append(f"| `{name}` | {seconds:.1f} | {cpu_by_file.get(name, 0.0):.1f} |")
    total_setup = sum(sum(times) for times in fixtures.values())
    lines += [
        "",
        f"Set-up of all fixtures (each its own time, without the fixtures it requests): {total_setup:.0f} s; "
        f"tests' own time: {sum(calls_by_file.values()):.0f} s; their CPU: {sum(cpu_by_file.values()):.0f} s.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(table([Path(arg) for arg in sys.argv[1:]]))

"""What a scenario reports, and the results file: figures, ratios against goals, the machine."""

import os
import platform
import sqlite3
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from importlib.metadata import version
from pathlib import Path


class Issue32Goal(StrEnum):
    """Issue 32's goals, in its order: the results file states each first, with its verdict, whatever ran."""

    SEND_R1 = "single send / R1 (durable reference), 1 recipient"
    SEND_R0 = "single send / R0 (bare reference), 1 recipient"
    SEND_P99_HALF_PEAK = "p99 of single send at half its peak"
    BATCH_SPEEDUP = "messages/s through batches of 100 / messages/s through single sends, same run"
    LARGE_BATCH_P99 = "p99 of a 500-message batch at 4 concurrent clients"
    INBOUND_DURABLE = "inbound / (aiosmtpd + durable commit)"
    DISPATCH_SMTPLIB = "dispatch over a relay / raw smtplib ceiling, DKIM on"
    DISPATCH_POST_OFFICE = "dispatch / django-post-office"
    DIRECT_RELAY = "direct delivery / relay mode"


@dataclass(frozen=True)
class Ratio:
    name: str
    value: float
    goal: str = ""  # e.g. ">= 0.5", read by people; `met` is the verdict
    met: bool | None = None
    issue_goal: Issue32Goal | None = None  # the issue 32 goal this ratio measures, if any


@dataclass
class Section:
    """One scenario's results: a table (header + rows), ratios, plots and free-form details."""

    title: str
    summary: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)  # markdown blocks, e.g. EXPLAIN output
    plots: list[str] = field(default_factory=list)  # file names next to the results file
    failed_requests: int = 0  # a benchmark whose requests fail measured the failure, not the path
    took: str = ""  # how long the scenario that wrote it ran, set by bench/__main__.py

    def markdown(self) -> str:
        lines = [f"## {self.title}", "", self.summary, ""]
        if self.took:
            lines += [f"_Ran {self.took}._", ""]
        lines += [_row(self.header), _row(["---"] * len(self.header)), *(_row(row) for row in self.rows), ""]
        if self.ratios:
            lines += ["| ratio | value | goal | met |", "| --- | --- | --- | --- |"]
            for ratio in self.ratios:
                verdict = {True: "yes", False: "**no**", None: ""}[ratio.met]
                lines.append(_row([ratio.name, f"{ratio.value:.2f}", ratio.goal, verdict]))
            lines.append("")
        lines += [f"- {note}" for note in self.notes]
        if self.notes:
            lines.append("")
        lines += [f"![{self.title}]({plot})\n" for plot in self.plots]
        lines += [block + "\n" for block in self.details]
        return "\n".join(lines)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def bottleneck_note(what: str, share: float, *, hint: str = "") -> str:
    """Whether a helper process (load generator, sink) could have capped a measurement: its CPU share."""
    verdict = "it was not the bottleneck." if share < 0.8 else "it may have been the bottleneck" + (hint or ".")
    return f"{what} used {share:.0%} of a core: {verdict}"


def ms(value: float) -> str:
    return f"{value:.1f} ms"


def _loadavg() -> str:
    return " / ".join(f"{load:.2f}" for load in os.getloadavg())


def _memory() -> str:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    return "unknown"


def _server_versions() -> tuple[str, str]:
    from django.conf import settings
    from django.db import connection
    from redis import Redis

    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        postgres = cursor.fetchone()[0]
    redis = Redis.from_url(settings.REDIS_URL).info("server")["redis_version"]
    return postgres, redis


def machine() -> dict[str, str]:
    postgres, redis = _server_versions()
    cpu = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    return {
        "cores (nproc)": cpu,
        "memory": _memory(),
        "load average at start (1/5/15 min)": _loadavg(),
        "Python": platform.python_version(),
        "Django": version("django"),
        "gunicorn": version("gunicorn"),
        "PostgreSQL": postgres,
        "Redis": redis,
        "SQLite": sqlite3.sqlite_version,
    }


def busy_with_other_work() -> bool:
    """Whether the machine is busy before the bench starts anything (5-minute load average above its
    cores). Read at the end, the load average counts the bench's own scenarios (the memory scenario
    alone drives it past 18 on 2 cores), so it says nothing of other work."""
    return os.getloadavg()[1] > (os.cpu_count() or 1)


def _goal_row(section: Section, ratio: Ratio) -> list[str]:
    return [section.title, ratio.name, f"{ratio.value:.2f}", ratio.goal, {True: "yes", False: "**no**"}[ratio.met]]


def goals_table(sections: list[Section]) -> list[str]:
    """Every ratio that has a goal, from every section, with its verdict: the run's summary, read first. Issue
    32's come first, one row each in its order, "not run" where their scenario did not run."""
    goals = [(section, ratio) for section in sections for ratio in section.ratios if ratio.met is not None]
    if not goals:
        return []
    measured = {ratio.issue_goal: (section, ratio) for section, ratio in goals if ratio.issue_goal}
    header = ["| issue 32's goal | section | figure | value | goal | met |", "| --- | --- | --- | --- | --- | --- |"]
    issue_rows = [
        _row([goal, *(_goal_row(*measured[goal]) if goal in measured else ["not run", "", "", "", ""])])
        for goal in Issue32Goal
    ]
    others = [_row(_goal_row(section, ratio)) for section, ratio in goals if not ratio.issue_goal]
    lines = ["## Goals", "", *header, *issue_rows, ""]
    if others:
        lines += ["The other goals:", "", "| section | figure | value | goal | met |"]
        lines += ["| --- | --- | --- | --- | --- |", *others, ""]
    return lines


def write_results(
    path: Path, *, command: str, machine_info: dict[str, str], sections: list[Section], busy_at_start: bool
) -> None:
    finished = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmark results",
        "",
        f"`{command}`, finished {finished}. Ratios compare figures measured in the same run on the same "
        "machine; absolute figures move with the machine's load, ratios much less.",
        "",
        *(
            [
                "**The machine was busy with other work when this run started** (5-minute load average above its "
                "core count, see below): absolute figures are well below what it does when idle, and even ratios "
                "are noisy.",
                "",
            ]
            if busy_at_start
            else []
        ),
        "| machine | |",
        "| --- | --- |",
        *(_row([key, value]) for key, value in machine_info.items()),
        _row(["load average at the end (the bench's own scenarios included)", _loadavg()]),
        "",
        *goals_table(sections),
        *(section.markdown() for section in sections),
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))

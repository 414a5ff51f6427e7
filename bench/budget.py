"""Where a measurement's CPU went: the machine's cores split between the product's processes, the
local PostgreSQL and Redis servers, and everything else (/proc), for each result's "where the time
goes" note.

A scenario whose goal is missed because the machine ran out of cores says so with these figures:
the sum per message is what the machine must spend, so its cores divided by it bound the rate.
"""

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.stack import cpu_seconds, tree_cpu_seconds

# The servers the stack runs beside the product, by process name (the `comm` of /proc/<pid>/stat).
SERVERS = {"PostgreSQL": "postgres", "Redis": "redis-server"}
EVERYTHING_ELSE = "everything else"


def machine_busy_seconds() -> float:
    """CPU seconds all cores have spent on anything but idling or waiting for I/O (/proc/stat)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(value) for value in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def named_cpu_seconds(name: str) -> float:
    """CPU seconds used so far by the live processes called `name` (a server's backends and helpers)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().rstrip("\n") == name:
                total += cpu_seconds(int(entry.name))
        except OSError:  # exited while we looked
            continue
    return total


@dataclass
class CpuBudget:
    """CPU seconds spent over one or more measured intervals, by part.

    `parts` name the product's own processes (a callable giving their pids, each read with its
    children); the local servers and the machine's total are read alongside them.
    """

    parts: dict[str, Callable[[], list[int]]]
    spent: dict[str, float] = field(default_factory=dict)
    machine: float = 0.0
    wall: float = 0.0

    def _read(self) -> dict[str, float]:
        readings = {name: sum(tree_cpu_seconds(pid) for pid in pids()) for name, pids in self.parts.items()}
        readings |= {label: named_cpu_seconds(name) for label, name in SERVERS.items()}
        return readings

    @contextmanager
    def measuring(self) -> Iterator[None]:
        before, busy, started = self._read(), machine_busy_seconds(), time.monotonic()
        yield
        after = self._read()
        for name, value in after.items():
            self.spent[name] = self.spent.get(name, 0.0) + max(0.0, value - before[name])
        self.machine += machine_busy_seconds() - busy
        self.wall += time.monotonic() - started

    def cpu_per_second(self) -> float:
        """CPU seconds the whole machine spent per wall second over the measured intervals."""
        return self.machine / max(self.wall, 1e-9)

    def busy(self) -> float:
        """How busy the machine's cores were over the measured intervals (0 to 1)."""
        return self.cpu_per_second() / (os.cpu_count() or 1)

    def per_unit_ms(self, count: int) -> dict[str, float]:
        """CPU per unit (ms) of each part, of each local server, and of everything else (EVERYTHING_ELSE)."""
        per = {name: seconds * 1000 / max(count, 1) for name, seconds in self.spent.items()}
        per[EVERYTHING_ELSE] = max(0.0, self.machine * 1000 / max(count, 1) - sum(per.values()))
        return per

    def note(self, *, what: str, unit: str, count: int) -> str:
        """One line on `what` was measured: how busy the cores were, the CPU per `unit` of each part and the rest."""
        cores = os.cpu_count() or 1
        if count <= 0 or self.wall <= 0:
            return f"Where the CPU went, {what}: nothing was measured."
        per = self.per_unit_ms(count)
        rest = per.pop(EVERYTHING_ELSE)
        total = sum(per.values()) + rest
        split = ", ".join(f"{name} {value:.2f} ms" for name, value in per.items() if value > 0)
        return (
            f"Where the CPU went, {what} (/proc): the machine's {cores} cores were "
            f"{self.busy():.0%} busy; per {unit}: {split}, everything else (load generator, "
            f"kernel, other processes) {rest:.2f} ms; {total:.2f} ms in all, so {cores} cores fully used would "
            f"reach at most {cores * 1000 / max(total, 1e-9):,.0f} {unit}s/s."
        )


def pids_of(*pids: int) -> Callable[[], list[int]]:
    return lambda: list(pids)


def goal_note(
    *,
    goal: str,
    rate: float,
    unit: str,
    capacity: float,
    on: str,
    spent_ms: float,
    needed: dict[str, float],
    rest: str,
) -> str:
    """What a missed rate goal would take, from a run's figures.

    At `rate` units a second, `capacity` CPU seconds a second (`on` says what they are: cores times
    how busy they were, or one for a single process) allow so much CPU per unit. `needed` names the
    parts of what a unit cost (`spent_ms`) that no change to the product removes, in ms; `rest`
    names what is left over."""
    allowed = capacity * 1000 / max(rate, 1e-9)
    fixed = sum(needed.values())
    parts = "; ".join(f"{name} {value:.2f} ms" for name, value in needed.items())
    head = (
        f"What the goal ({goal}) would take: {rate:,.0f} {unit}s/s on {on} ({capacity:.2f} CPU seconds a "
        f"second) allows {allowed:.2f} ms per {unit}; this run spent {spent_ms:.2f} ms. Needed whatever the "
        f"product's code does: {parts} ({fixed:.2f} ms together)."
    )
    left, took = allowed - fixed, spent_ms - fixed
    if spent_ms <= allowed:
        return f"{head} The CPU spent fits the goal: the rate was held back by waiting, not by work."
    if left <= 0:
        return f"{head} That is more than the goal allows, so no change to {rest} can meet it on this machine."
    return (
        f"{head} That leaves {left:.2f} ms for {rest}, which took {took:.2f} ms: it would have to shrink by "
        f"{max(0.0, 1 - left / max(took, 1e-9)):.0%}. The profile below says where it goes."
    )

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

    def note(self, *, what: str, unit: str, count: int) -> str:
        """One line on `what` was measured: how busy the cores were, the CPU per `unit` of each part and the rest."""
        cores = os.cpu_count() or 1
        if count <= 0 or self.wall <= 0:
            return f"Where the CPU went, {what}: nothing was measured."
        per = {name: seconds * 1000 / count for name, seconds in self.spent.items() if seconds > 0}
        rest = max(0.0, self.machine * 1000 / count - sum(per.values()))
        total = sum(per.values()) + rest
        split = ", ".join(f"{name} {value:.2f} ms" for name, value in per.items())
        return (
            f"Where the CPU went, {what} (/proc): the machine's {cores} cores were "
            f"{self.machine / (self.wall * cores):.0%} busy; per {unit}: {split}, everything else (load generator, "
            f"kernel, other processes) {rest:.2f} ms; {total:.2f} ms in all, so {cores} cores fully used would "
            f"reach at most {cores * 1000 / max(total, 1e-9):,.0f} {unit}s/s."
        )


def pids_of(*pids: int) -> Callable[[], list[int]]:
    return lambda: list(pids)

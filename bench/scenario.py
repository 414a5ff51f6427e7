"""What a scenario is: a name, its size arguments, a tiny size for CI, and a run function."""

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.report import Section
from bench.stack import Services


@dataclass(frozen=True)
class Context:
    services: Services
    output: Path  # plots go here, next to latest.md


@dataclass(frozen=True)
class Scenario:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]  # its size arguments, with full-run defaults
    tiny: dict[str, int]  # argument values for --tiny (seconds, for CI)
    run: Callable[[argparse.Namespace, Context], list[Section]]

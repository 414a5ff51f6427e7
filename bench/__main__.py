"""`python -m bench all` (what `make bench` runs) or one scenario with its size arguments.

    python -m bench all [--tiny]                     every scenario, results in bench/results/
    python -m bench accept --seconds 2 --concurrency 16
    python -m bench list --small 10000 --large 1000000

Needs DATABASE_URL (a PostgreSQL server: the bench creates and drops its own database on it)
and REDIS_URL (the Redis database the bench servers may use).
"""

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

from bench.scenarios import SCENARIOS
from bench.stack import ROOT, BenchError, configure_django, postgres_database, services_from_environment

RESULTS = ROOT / "bench" / "results"


def _parser(scenarios: dict) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("all", help="every scenario; writes bench/results/latest.md unless --tiny")
    for scenario in scenarios.values():
        sub = commands.add_parser(scenario.name, help=scenario.help)
        scenario.add_arguments(sub)
    for sub in commands.choices.values():
        sub.add_argument("--tiny", action="store_true", help="a tiny size that runs in seconds (for CI)")
        sub.add_argument("--output", type=Path, help="where latest.md and the plots go")
        sub.add_argument("--database", help="name of the bench's own database (default: DATABASE_URL's name + _run)")
    return parser


def _arguments_for(scenario, args: argparse.Namespace) -> argparse.Namespace:
    """A scenario's own arguments: its defaults (or tiny size) under `all`, else what was given."""
    if args.command == "all":
        parser = argparse.ArgumentParser()
        scenario.add_arguments(parser)
        values = parser.parse_args([])
    else:
        values = argparse.Namespace(**vars(args))
    if args.tiny:
        for name, value in scenario.tiny.items():
            setattr(values, name, value)
    return values


def main(argv: list[str]) -> int:
    args = _parser(SCENARIOS).parse_args(argv)
    services = services_from_environment(args.database)
    chosen = list(SCENARIOS.values()) if args.command == "all" else [SCENARIOS[args.command]]
    full_run = args.command == "all" and not args.tiny
    output = args.output or (RESULTS if full_run else ROOT / "var" / "bench")
    output.mkdir(parents=True, exist_ok=True)

    configure_django(services)
    from bench.report import busy_with_other_work, machine, write_results
    from bench.scenario import Context

    started_all, busy_at_start = time.monotonic(), busy_with_other_work()
    with postgres_database(services.database_url):
        machine_info = machine()
        sections = []
        for scenario in chosen:
            print(f"bench: {scenario.name} …", file=sys.stderr, flush=True)
            started = time.monotonic()
            produced = scenario.run(_arguments_for(scenario, args), Context(services=services, output=output))
            took = time.monotonic() - started
            load = " / ".join(f"{value:.2f}" for value in os.getloadavg())
            for section in produced:
                section.took = (
                    f"{took:.0f} s (scenario `{scenario.name}`, set-up included); load average at its end {load}"
                )
            print(f"bench: {scenario.name} took {took:.0f} s", file=sys.stderr, flush=True)
            sections += produced
    command = "python -m bench " + shlex.join(argv)
    machine_info["run time (all scenarios, set-up included)"] = f"{(time.monotonic() - started_all) / 60:.1f} min"
    write_results(
        output / "latest.md", command=command, machine_info=machine_info, sections=sections, busy_at_start=busy_at_start
    )
    print((output / "latest.md").read_text())
    print(f"bench: results in {output / 'latest.md'}", file=sys.stderr)
    failed = {section.title: section.failed_requests for section in sections if section.failed_requests}
    for title, count in failed.items():
        print(f"bench: {count} requests failed in {title} (see the errors column)", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        sys.exit(2)

"""The corpus figures (recall, wrong-address rate, non-reports as bounces) in the terminal summary."""

import pytest

# Properties tests record with `record_property` to be quoted from the summary, named "figure: ...".
FIGURE_PREFIX = "figure: "


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for outcome in ("passed", "failed"):
        for report in terminalreporter.stats.get(outcome, []):
            figures = [
                (name, value)
                for name, value in getattr(report, "user_properties", [])
                if str(name).startswith(FIGURE_PREFIX)
            ]
            if figures and report.when == "call":
                terminalreporter.write_line(f"{report.nodeid}:")
                for name, value in figures:
                    terminalreporter.write_line(f"  {name.removeprefix(FIGURE_PREFIX)}: {value}")

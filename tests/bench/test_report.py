"""bench/report.py writes latest.md: its banner says whether other work loaded the machine."""

from pathlib import Path

import pytest

from bench.report import write_results


@pytest.mark.parametrize("busy_at_start", [True, False])
def test_the_busy_banner_is_written_only_when_the_machine_was_busy_before_the_run(tmp_path: Path, busy_at_start: bool):
    path = tmp_path / "latest.md"

    write_results(
        path, command="python -m bench all", machine_info={"cores": "2"}, sections=[], busy_at_start=busy_at_start
    )

    text = path.read_text()
    assert ("busy with other work when this run started" in text) is busy_at_start
    assert "| load average at the end (the bench's own scenarios included) |" in text

"""bench/report.py writes latest.md: its banner says whether other work loaded the machine."""

from pathlib import Path

import pytest

from bench.report import Issue32Goal, Ratio, Section, write_results


@pytest.mark.parametrize("busy_at_start", [True, False])
def test_the_busy_banner_is_written_only_when_the_machine_was_busy_before_the_run(tmp_path: Path, busy_at_start: bool):
    path = tmp_path / "latest.md"

    write_results(
        path, command="python -m bench all", machine_info={"cores": "2"}, sections=[], busy_at_start=busy_at_start
    )

    text = path.read_text()
    assert ("busy with other work when this run started" in text) is busy_at_start
    assert "| load average at the end (the bench's own scenarios included) |" in text


def test_the_goals_table_states_every_issue_32_goal_in_order_and_which_did_not_run(tmp_path: Path):
    path = tmp_path / "latest.md"
    batch = Section(title="12. Batch sending", summary="", header=["how"])
    batch.ratios += [
        Ratio("p99 of a 500-message batch at 4 clients / 1500 ms", 2.2, "< 1", False, Issue32Goal.LARGE_BATCH_P99),
        Ratio(
            "messages/s through batches of 100 / through single sends", 14.1, ">= 8", True, Issue32Goal.BATCH_SPEEDUP
        ),
    ]
    listing = Section(title="3. List scaling", summary="", header=["page"])
    listing.ratios.append(Ratio("p50, 1 000 000 / 10 000 messages", 0.9, "<= 1.3", True))

    write_results(path, command="python -m bench all", machine_info={}, sections=[batch, listing], busy_at_start=False)

    lines = path.read_text().split("## Goals", 1)[1].splitlines()
    issue_rows = [line for line in lines if line.startswith("| ") and line.split(" | ")[0][2:] in set(Issue32Goal)]
    assert [row.split(" | ")[0][2:] for row in issue_rows] == list(Issue32Goal)
    assert issue_rows[3].endswith("| 14.10 | >= 8 | yes |") and issue_rows[4].endswith("| 2.20 | < 1 | **no** |")
    assert sum("| not run |" in row for row in issue_rows) == 7
    assert "| 3. List scaling | p50, 1 000 000 / 10 000 messages | 0.90 | <= 1.3 | yes |" in lines

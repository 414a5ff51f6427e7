"""Outbound code stays in small named steps: radon grades no function of messaging/outbound/ D or worse.

Dispatch is where exactly-once can break; its control flow once grew to grade E (`_send_one`, 36) and D
(`send_batch`, 29) before it was split into steps (issue 29). Grades: A 1-5, B 6-10, C 11-20, D 21-30."""

from pathlib import Path

from radon.complexity import cc_rank, cc_visit

OUTBOUND = Path(__file__).resolve().parents[2] / "messaging" / "outbound"


def graded(path: Path) -> dict[str, str]:
    """{"file:line name": "grade (complexity)"} for every function and method of `path`."""
    return {
        f"{path.name}:{block.lineno} {block.fullname}": f"{cc_rank(block.complexity)} ({block.complexity})"
        for block in cc_visit(path.read_text())
    }


def test_no_function_in_messaging_outbound_is_graded_d_or_worse():
    grades = {name: grade for path in sorted(OUTBOUND.rglob("*.py")) for name, grade in graded(path).items()}

    assert any(name.startswith("dispatch.py:") and name.endswith(" send_batch") for name in grades)
    assert {name: grade for name, grade in grades.items() if grade[0] in "DEF"} == {}

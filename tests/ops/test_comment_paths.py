"""Every file path named in a comment or a docstring exists (tests/comment_paths.py, run by `make lint` too)."""

from pathlib import Path

import pytest

from tests.comment_paths import missing_paths, python_files


@pytest.mark.live  # runs git ls-files
def test_every_path_named_in_the_repositorys_comments_exists():
    assert {str(path): missing_paths(path) for path in python_files() if missing_paths(path)} == {}


def test_the_check_names_the_line_of_a_path_that_does_not_exist(tmp_path: Path):
    module = tmp_path / "example.py"
    module.write_text(
        '"""Sends through messaging/outbound/dispatch.py.\n\nAnd messaging/outbound/gone.py."""\n\n'
        "# see docs/architecture.md and docs/nowhere.md:12\n"
        'PATH = "messaging/not_checked.py"  # a string, not a comment\n'
    )
    assert missing_paths(module) == [(3, "messaging/outbound/gone.py"), (5, "docs/nowhere.md")]

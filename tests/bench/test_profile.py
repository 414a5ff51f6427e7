"""bench/profile.py samples a running process with py-spy and sums where its Python CPU goes."""

import subprocess
import sys

import pytest

from bench.profile import Profile, excerpt, parse, profiling
from tests.harness import ROOT

# A process of the project's own code that keeps a core busy in one function until killed.
BUSY = "from mailservice.ids import random_token\nwhile True:\n    random_token(64)"


@pytest.mark.live
def test_the_excerpt_names_the_busy_project_function_and_its_components(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", BUSY], cwd=ROOT)
    profile = Profile()
    try:
        with profiling([child.pid], seconds=2, into=profile, workdir=tmp_path):
            pass
    finally:
        child.kill()
        child.wait()

    assert profile.failure == "" and profile.samples > 100
    text = excerpt(profile, what="a busy loop")
    assert "`random_token` (mailservice/ids.py)" in text
    assert "| the project: mailservice |" in text


def test_raw_stacks_are_summed_by_stack():
    stack = "main (app.py:1);work (messaging/outbound/dispatch.py:9)"
    raw = f"{stack} 3\n{stack} 2\nbad line\n"

    assert parse(raw) == {("main (app.py:1)", "work (messaging/outbound/dispatch.py:9)"): 5}


def test_a_profile_that_could_not_be_taken_says_why():
    assert excerpt(Profile(failure="py-spy failed: ptrace refused"), what="x") == (
        "Profile of x: not taken (py-spy failed: ptrace refused)."
    )


@pytest.mark.live
def test_a_process_py_spy_cannot_read_leaves_a_one_line_reason(tmp_path):
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its pid now names no process
    profile = Profile()

    with profiling([gone.pid], seconds=1, into=profile, workdir=tmp_path):
        pass

    assert profile.failure.startswith("py-spy failed (exit 1): Error: ") and "\n" not in profile.failure
    assert excerpt(profile, what="x").startswith("Profile of x: not taken (py-spy failed")

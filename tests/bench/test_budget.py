"""bench/budget.py splits a measurement's CPU between the processes it names, the local servers and
the rest of the machine, from /proc."""

import subprocess
import sys
import time

from bench.budget import CpuBudget, pids_of

BUSY_THEN_IDLE = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\ntime.sleep(60)"


def test_a_busy_process_is_charged_its_cpu_and_the_machine_at_least_as_much():
    child = subprocess.Popen([sys.executable, "-c", BUSY_THEN_IDLE])
    budget = CpuBudget({"busy child": pids_of(child.pid)})
    try:
        with budget.measuring():
            time.sleep(1.0)  # the child's 0.4 s of CPU falls inside
    finally:
        child.kill()
        child.wait()

    assert 0.3 <= budget.spent["busy child"] <= 0.6
    assert budget.machine >= budget.spent["busy child"]
    note = budget.note(what="the child", unit="message", count=100)
    assert note.startswith("Where the CPU went, the child (/proc): the machine's")
    assert f"busy child {budget.spent['busy child'] * 10:.2f} ms" in note

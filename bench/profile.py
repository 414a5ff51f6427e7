"""A profile excerpt for a result: where the product's processes spend their Python CPU.

py-spy samples the processes, without pausing them, only while a thread holds the GIL: the
Python work, not the time spent waiting on a socket or in C code that releases the GIL. The
samples are summed two ways: by component (the package of the innermost frame: Django, DRF,
psycopg, the project's own apps...) and by the project's own functions, inclusive of what they
call. A scenario takes the profile in an extra, untimed round, so the sampling costs its
measured figures nothing.
"""

import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from bench.stack import ROOT

RATE = 200  # samples per second per process
OWN_PACKAGES = frozenset(path.name for path in ROOT.iterdir() if (path / "__init__.py").is_file())


@dataclass
class Profile:
    stacks: Counter[tuple[str, ...]] = field(default_factory=Counter)  # frames, outermost first -> samples
    seconds: float = 0.0
    processes: int = 0
    failure: str = ""  # why no profile was taken (py-spy missing, ptrace refused)

    @property
    def samples(self) -> int:
        return sum(self.stacks.values())


def _frame_file(frame: str) -> str:
    """'func (path/to/file.py:12)' -> 'path/to/file.py'."""
    return frame.rpartition(" (")[2].rstrip(")").rpartition(":")[0]


def _component(frame: str) -> str:
    path = _frame_file(frame)
    top = path.split("/", 1)[0].removesuffix(".py")
    if top in OWN_PACKAGES:
        return f"the project: {top}"
    return top or "(unknown)"


def _is_own(frame: str) -> bool:
    return _frame_file(frame).split("/", 1)[0] in OWN_PACKAGES


def _function(frame: str) -> str:
    name, _, location = frame.rpartition(" (")
    return f"`{name}` ({location.rpartition(':')[0]})"


def parse(raw: str) -> Counter[tuple[str, ...]]:
    """py-spy's raw (collapsed) output: one `frame;frame;... count` line per distinct stack."""
    stacks: Counter[tuple[str, ...]] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[tuple(stack.split(";"))] += int(count)
    return stacks


@contextmanager
def profiling(pids: list[int], *, seconds: float, into: Profile, workdir: Path) -> Iterator[None]:
    """Sample `pids` for `seconds` from entering the block; leaving it waits for the samples, into `into`."""
    beside = Path(sys.executable).with_name("py-spy")  # the bench extra installs it into the virtualenv
    command = [str(beside) if beside.exists() else "py-spy"]
    outputs = [workdir / f"profile-{pid}.txt" for pid in pids]
    with ExitStack() as stack:
        try:
            recorders = [
                stack.enter_context(
                    subprocess.Popen(
                        [*command, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds)))]
                        + ["--rate", str(RATE), "--format", "raw", "--output", str(output), "--nonblocking", "--gil"],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
                for pid, output in zip(pids, outputs, strict=True)
            ]
        except OSError as error:  # py-spy not installed (the bench extra has it)
            into.failure = f"py-spy could not start: {error}"
            yield
            return
        yield
        for recorder, output in zip(recorders, outputs, strict=True):
            _, errors = recorder.communicate(timeout=seconds + 30)
            if recorder.returncode != 0 or not output.exists():
                # Its first line says what went wrong; a backtrace follows.
                first_line = (errors or "").strip().partition("\n")[0]
                into.failure = f"py-spy failed (exit {recorder.returncode}): {first_line or 'no output'}"
                continue
            into.stacks += parse(output.read_text())
            output.unlink()
        into.seconds += seconds
        into.processes = max(into.processes, len(pids))


def excerpt(profile: Profile, *, what: str, top: int = 15) -> str:
    """A markdown block: the samples by component (self) and the project's own functions (inclusive)."""
    if profile.failure or not profile.samples:
        return f"Profile of {what}: not taken ({profile.failure or 'no samples'})."
    total = profile.samples
    by_component: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, count in profile.stacks.items():
        by_component[_component(frames[-1])] += count
        for function in dict.fromkeys(_function(frame) for frame in frames if _is_own(frame)):
            own[function] += count
    lines = [
        f"Profile of {what} (py-spy, {total:,} samples at {RATE}/s of {profile.processes} process(es) while a "
        f"thread held the GIL, over {profile.seconds:.0f} s of an extra untimed round): where the Python CPU goes.",
        "",
        "| component (innermost frame) | share |",
        "| --- | --- |",
        *(f"| {name} | {count / total:.1%} |" for name, count in by_component.most_common(top)),
        "",
        "| the project's function (inclusive of what it calls) | share |",
        "| --- | --- |",
        *(f"| {name} | {count / total:.1%} |" for name, count in own.most_common(top)),
    ]
    return "\n".join(lines)

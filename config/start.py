"""`make start`: the Procfile's processes together, for development.

honcho stops every process as soon as one exits, so one that could not start (a port in use, a
missing setting) silently took the other five down with it. This runner says which process ended and
how, and keeps the others running; Ctrl-C (or SIGTERM) stops them all. Each line a process prints is
prefixed with its name. The environment is .env's (variables already set win, as in config/settings.py),
so `${PORT:-8000}` in the Procfile is 8000 unless .env or the shell says otherwise.
"""

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from dotenv import dotenv_values

ROOT = Path(__file__).resolve().parent.parent
STOP_SECONDS = 10


def procfile(path: Path) -> dict[str, str]:
    """`name: command` lines; comments and blank lines skipped."""
    processes: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        name, colon, command = line.partition(":")
        if line.strip() and not line.lstrip().startswith("#") and colon:
            processes[name.strip()] = command.strip()
    return processes


def _environment() -> dict[str, str]:
    env = {key: value for key, value in dotenv_values(ROOT / ".env").items() if value is not None}
    env.update(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _relay(name: str, child: subprocess.Popen[bytes], width: int, lock: threading.Lock) -> None:
    assert child.stdout is not None
    for raw in child.stdout:
        with lock:
            sys.stdout.write(f"{name:<{width}} | {raw.decode('utf-8', 'replace').rstrip()}\n")
            sys.stdout.flush()


def run(processes: dict[str, str]) -> int:
    """Run every process until all have ended or a signal stops them; 1 if any ended with an error."""
    env, lock, width = _environment(), threading.Lock(), max(map(len, processes), default=0)
    children: dict[str, subprocess.Popen[bytes]] = {}
    for name, command in processes.items():
        children[name] = subprocess.Popen(
            ["/bin/sh", "-c", f"exec {command}"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a signal to the runner is not sent to them behind its back
        )
        threading.Thread(target=_relay, args=(name, children[name], width, lock), daemon=True).start()
    stopping = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stopping.set())
    signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    failed = False
    running = dict(children)
    while running and not stopping.wait(0.2):
        for name, child in list(running.items()):
            if (code := child.poll()) is not None:
                del running[name]
                failed |= code != 0
                left = ", ".join(running) or "none"
                with lock:
                    print(f"start: {name} exited with status {code}; still running: {left}", flush=True)
    for child in running.values():
        os.killpg(child.pid, signal.SIGTERM)
    for name, child in running.items():
        try:
            child.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        print(f"start: {name} stopped", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run(procfile(ROOT / "Procfile")))

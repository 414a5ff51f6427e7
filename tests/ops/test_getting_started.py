"""docs/getting-started.md, followed in order as a reader would, against a fresh service.

Every ```sh block runs in bash, in order, its variables kept from one block to the next; every ```ini
block is added to the service's .env. `make run` is run as the Makefile's own recipe (its install and
.env steps aside); the webhook receiver's block keeps running in the background, as in the reader's
second terminal. Loopback servers stand in for the reader's world: a DNS server, where the test publishes
the records `check_domain` printed as missing, and a relay that refuses one unknown mailbox at RCPT.
What differs from the page is only where things are, in `PLACES`: the ports, the domain and the relay.
"""

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.dns_server import dns_server
from tests.harness import ROOT, ChildProcess, free_port, smtp_sink, wait_until

pytestmark = pytest.mark.live

PAGE = ROOT / "docs" / "getting-started.md"
UNKNOWN = "no-such-user@example.org"
_FENCE = re.compile(r"^```(sh|ini)\n(.*?)^```$", re.M | re.S)


@dataclass(frozen=True)
class Block:
    language: str
    text: str


def page_blocks() -> list[Block]:
    return [Block(language, text) for language, text in _FENCE.findall(PAGE.read_text())]


def make_run_recipe() -> list[str]:
    """The shell lines of the Makefile's `run` target, $(BIN) spelled out."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^run:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "the Makefile has no run target"
    return [line.strip().replace("$(BIN)", ".venv/bin") for line in recipe.group(1).splitlines()]


class Reader:
    """The reader's terminals: the service (restarted as `make run` is), the receiver, and a shell whose
    variables outlive each block."""

    def __init__(self, tmp: Path, places: dict[str, str], resolver: str) -> None:
        self.places, self.state = places, tmp / "shell-state"
        self.env_file = tmp / ".env"
        self.env_file.write_text("DEBUG=true\n")  # what `make run` writes first
        self.state.write_text("")
        self.env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp),
            "LANG": "C.UTF-8",
            "MAILSERVICE_ENV_FILE": str(self.env_file),
            "MAILSERVICE_VAR_DIR": str(tmp / "var"),
            "MAILSERVICE_DNS_RESOLVER": resolver,  # the reader's machine asks the system's resolver
        }
        self.names = sorted(set(re.findall(r"^([A-Z_]+)=", PAGE.read_text(), re.M)))
        self.service: ChildProcess | None = None
        self.receiver: ChildProcess | None = None

    def localised(self, text: str) -> str:
        for written, here in self.places.items():
            text = text.replace(written, here)
        return text

    def shell(self, block: str) -> str:
        script = f"set -eo pipefail\nsource {self.state}\n{block}\ndeclare -p {' '.join(self.names)} 2>/dev/null"
        script += f" > {self.state} || true\n"
        done = subprocess.run(
            ["bash", "-c", script], cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=120, check=False
        )
        assert done.returncode == 0, f"{block}\nexited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def make_run(self, port: str) -> None:
        if self.service:
            self.service.stop()
        *setup, serve = (self.localised(line) for line in make_run_recipe())
        for line in setup:
            self.shell(line)
        assert serve.endswith(f"127.0.0.1:{port}"), serve
        self.service = ChildProcess(
            ["bash", "-c", f"exec {serve}"], name="make-run", env=self.env, ready=lambda: self._answers(port)
        )
        self.service.start()

    def _answers(self, port: str) -> bool:
        done = subprocess.run(["curl", "-sf", f"http://127.0.0.1:{port}/v1/openapi.json", "-o", "/dev/null"])
        return done.returncode == 0

    def start_receiver(self, block: str) -> None:
        command = f"source {self.state}\nexec {block.strip()}"
        self.receiver = ChildProcess(
            ["bash", "-c", command],
            name="receiver",
            env=self.env,
            ready=lambda: "listening on" in self.receiver_lines(),
        )
        self.receiver.start()

    def receiver_lines(self) -> str:
        return self.receiver.log_path.read_text() if self.receiver else ""

    def stop(self) -> None:
        for child in (self.service, self.receiver):
            if child:
                child.stop()


def publish_what_is_missing(zone, output: str) -> int:
    """Publish each `missing … NAME TXT VALUE` line `check_domain` printed, as the reader does at their DNS host."""
    published = 0
    for name, value in re.findall(r"^missing\s+[^:]+: (\S+) TXT (.+)$", output, re.M):
        zone.publish_txt(name, value)
        published += 1
    return published


def test_every_command_of_the_tutorial_works_as_written(tmp_path):
    web_port, hook_port = str(free_port()), str(free_port())
    with dns_server() as (zone, resolver), smtp_sink() as relay:
        reply = f"550 5.1.1 <{UNKNOWN}>: Recipient address rejected: User unknown in local recipient table"
        relay.behaviour.rejected_rcpts[UNKNOWN] = reply
        places = {
            "127.0.0.1:8000": f"127.0.0.1:{web_port}",
            "127.0.0.1:9000": f"127.0.0.1:{hook_port}",
            "--port 9000": f"--port {hook_port}",
            "DOMAIN=example.com": "DOMAIN=tutorial.test",
            "smtp.example.net:587": f"127.0.0.1:{relay.port}",
        }
        reader = Reader(tmp_path, places, resolver)
        try:
            follow(reader, zone, web_port, relay)
        finally:
            reader.stop()


def follow(reader: Reader, zone, web_port: str, relay) -> None:
    checks = 0
    for block in page_blocks():
        text = reader.localised(block.text)
        if block.language == "ini":
            reader.env_file.write_text(reader.env_file.read_text() + text)
        elif text.strip() == "make run":
            reader.make_run(web_port)
        elif "webhook_receiver.py" in text:
            reader.start_receiver(text)
        else:
            output = reader.shell(text)
            if "check_domain" in text:
                checks += 1
                published = publish_what_is_missing(zone, output)
                # The first check finds nothing, so the reader publishes the two records; the second finds both.
                assert (checks, published) in {(1, 2), (2, 0)}, output
                found = len(re.findall(r"^found ", output, re.M))
                assert checks == 1 or (found, "is now verified" in output) == (2, True), output
            expect_after(reader, text, output)

    assert checks == 2
    # The refused mailbox's bounce reached the application once.
    assert len(re.findall(rf"^email\.bounced .* {re.escape(UNKNOWN)} ", reader.receiver_lines(), re.M)) == 1
    # The relay got the one message to a real mailbox; the unknown one was refused at RCPT, then never sent again.
    assert [received.rcpt_tos for received in relay.received] == [["you@example.org"]]


# What the page says each send leads to: the receiver's line for it, waited for as the reader would (a block
# is known by its recipient and text).
PRINTED = {
    "bounced@simulator.test": r"^email\.bounced \S+ msg_\S+ bounced@simulator\.test bounced$",
    "you@example.org": r"^email\.delivered \S+ msg_\S+ you@example\.org delivered$",
    "Anyone?": rf"^email\.bounced \S+ msg_\S+ {re.escape(UNKNOWN)} bounced$",
    "Again?": rf"^email\.suppressed \S+ (msg_\S+) {re.escape(UNKNOWN)} failed\nemail\.failed \S+ \1 ",
}


def expect_after(reader: Reader, text: str, output: str) -> None:
    if "/v1/send" in text:
        assert re.search(r'"id": ?"msg_', output), output
    if "suppressions list" in text:
        assert UNKNOWN in output, output
    for sent, printed in PRINTED.items():
        if sent in text:
            wait_for_line(reader, printed)


def wait_for_line(reader: Reader, pattern: str) -> None:
    wait_until(
        lambda: re.search(pattern, reader.receiver_lines(), re.M),
        timeout=30,
        message=f"the receiver to print {pattern!r}; it printed:\n{reader.receiver_lines()}",
    )


def test_the_page_has_the_blocks_the_test_follows():
    blocks = page_blocks()
    assert [block.text.strip() for block in blocks].count("make run") == 3
    assert sum(block.language == "ini" for block in blocks) == 2
    assert sum("webhook_receiver.py" in block.text for block in blocks) == 1

"""A private postgrey (Debian's `postgrey` package): the greylisting policy service a Postfix of the
test (tests/harness/postfix.py, `policy_service`) asks at RCPT, as a production MX does
(`check_policy_service inet:…`).

Its database lives in a temporary directory; it listens on 127.0.0.1 and a free port, in the
foreground (a ChildProcess), with the test's `delay` (postgrey's default is 300 s). Postfix answers
a greylisted triplet "450 4.2.0 <rcpt>: Recipient address rejected: Greylisted, see …".
"""

import os
import shutil
import socket
import tempfile
from pathlib import Path

from tests.harness.process import ChildProcess, free_port

POSTGREY = shutil.which("postgrey", path=f"{os.environ.get('PATH', '')}:/usr/sbin")


class PostgreyServer(ChildProcess):
    """postgrey on 127.0.0.1:`port`, greylisting each new triplet for `delay` seconds."""

    def __init__(self, *, delay: int) -> None:
        assert POSTGREY, "postgrey is not installed (deploy/system-packages.txt: make system-packages)"
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="postgrey-"))
        shutil.chown(self.directory, "postgrey", "postgrey")  # it drops to that user, as the package runs it
        command = [
            POSTGREY,
            f"--inet=127.0.0.1:{self.port}",
            f"--dbdir={self.directory}",
            f"--delay={delay}",
            "--auto-whitelist-clients=0",  # every triplet is greylisted, however many the client delivered
            "--whitelist-clients=/dev/null",
            "--whitelist-recipients=/dev/null",
        ]
        super().__init__(command, name="postgrey", env=dict(os.environ), ready=self._listens)

    @property
    def address(self) -> str:
        """As Postfix names it: `check_policy_service inet:<address>`."""
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        super().stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _listens(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                return True
        except OSError:
            return False

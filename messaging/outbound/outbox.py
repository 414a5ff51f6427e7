"""The file outbox (EMAIL_URL unset): each message is written to MAILSERVICE_OUTBOX_DIR instead of
leaving the machine, and every recipient is answered 250.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from messaging.outbound.envelope import Connection, Envelope, Reply, SendResult


class OutboxConnection:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def send(self, *, envelope: Envelope, data: bytes, name: str) -> SendResult:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{name}.eml"
        partial = path.with_suffix(".eml.partial")
        partial.write_bytes(data)
        partial.replace(path)  # readers never see a half-written file
        return SendResult(final=Reply(250, f"written to {path}"), accepted=list(envelope.recipients))


class OutboxTransport:
    host = ""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        yield OutboxConnection(self.directory)

    def close(self) -> None:
        pass  # it keeps nothing open

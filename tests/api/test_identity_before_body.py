"""The key and the rate limit are checked before any byte of a body is read (issue 41, item 1), written as
the attack against the Procfile's server (gunicorn, uvicorn, Django in a2wsgi's threads): 40 MiB batches
that carry no valid key, or come from a client over its rate limit, cost the web worker no memory and
are answered while most of their body is still unsent; authenticated 40 MiB batches at once stay
within a bound."""

import json
import select
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import h11
import httpx
import pytest

from apikeys.models import Permission
from mailservice.api.middleware import BATCH_PATH
from messaging.models import Message
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import WEB_COMMAND, ChildServer, child_server
from tests.harness.servers import answers_http

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

MIB = 1024 * 1024
BODY_BYTES = 40 * MIB  # MAILSERVICE_BATCH_MAX_BYTES, the most a batch may be
DEADLINE = 120  # seconds any one request of these tests may take on two busy cores


@pytest.fixture
def server(transactional_db: None, request: pytest.FixtureRequest) -> Iterator[ChildServer]:
    """The Procfile's web server with one worker, so the worker measured is the one that answers."""
    env = getattr(request, "param", {})
    command = [*WEB_COMMAND, "--workers", "1"]
    with child_server(
        command, name="web", ready=lambda port: answers_http(f"http://127.0.0.1:{port}/v1/openapi.json"), env=env
    ) as child:
        yield child


def worker_pid(master: int) -> int:
    [child] = Path(f"/proc/{master}/task/{master}/children").read_text().split()
    return int(child)


def memory_mib(pid: int) -> tuple[float, float]:
    """(resident, peak resident) memory of a process in MiB: VmRSS and VmHWM of /proc/<pid>/status."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def post_until_answered(port: int, headers: dict[str, str]) -> tuple[int, dict, int]:
    """POST a declared 40 MiB batch, sending its body only while no answer has come; (status, JSON body,
    bytes of the body sent when the answer's head arrived). The client never holds the body."""
    client = h11.Connection(our_role=h11.CLIENT)
    request_headers = [("Host", "127.0.0.1"), ("Content-Type", "application/json"), *headers.items()]
    request_headers.append(("Content-Length", str(BODY_BYTES)))
    filler = b" " * 65536
    sent, status, body = 0, 0, b""
    deadline = time.monotonic() + DEADLINE
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        sock.sendall(client.send(h11.Request(method="POST", target=BATCH_PATH, headers=request_headers)))
        sock.setblocking(False)
        while not status:
            assert time.monotonic() < deadline, f"no answer after {sent} bytes of the body"
            writers = [sock] if sent < BODY_BYTES else []
            readable, writable, _ = select.select([sock], writers, [], 1)
            if readable:
                client.receive_data(sock.recv(65536))
                event = client.next_event()
                if isinstance(event, h11.Response):
                    status = event.status_code
            elif writable:
                sent += sock.send(filler[: BODY_BYTES - sent])
        sock.setblocking(True)
        while (event := client.next_event()) is not h11.PAUSED and not isinstance(event, h11.EndOfMessage):
            if event is h11.NEED_DATA:
                client.receive_data(sock.recv(65536))
            elif isinstance(event, h11.Data):
                body += event.data
    return status, json.loads(body), sent


def attack(port: int, headers: dict[str, str], count: int) -> list[tuple[int, dict, int]]:
    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(lambda _: post_until_answered(port, headers), range(count)))


def warm(port: int, headers: dict[str, str]) -> None:
    """One small request of the same kind first: what the first one loads stays loaded, and is no attack."""
    httpx.post(f"http://127.0.0.1:{port}{BATCH_PATH}", json={"messages": []}, headers=headers, timeout=DEADLINE)


def key_header(kind: str) -> dict[str, str]:
    if kind == "no key":
        return {}
    if kind == "wrong key":
        return {"Authorization": "Bearer ms_AAAAAAAAAAAA_wrongwrongwrong"}
    read_only = ApiKeyFactory(domain=DomainFactory(name="acme.example.com"), permissions=(Permission.READ,))
    return {"Authorization": f"Bearer {read_only.secret}"}


@pytest.mark.parametrize(
    ("kind", "answer"),
    [
        ("no key", (401, "Unauthorized")),
        ("wrong key", (401, "Unauthorized")),
        ("read-only key", (403, "MissingPermission")),
    ],
    ids=["no key", "wrong key", "read-only key"],
)
def test_30_40_mib_batches_without_a_sending_key_are_refused_without_their_bodies_being_read(server, kind, answer):
    headers = key_header(kind)
    warm(server.port, headers)
    worker = worker_pid(server.pid)
    before, _ = memory_mib(worker)

    answers = attack(server.port, headers, 30)

    assert [(status, body["error"]["code"]) for status, body, _ in answers] == [answer] * 30
    # Answered with most of the body unsent: what was sent sits in the sockets' buffers, unread by the
    # server (uvicorn reads at most 64 KiB ahead of the application).
    assert max(sent for *_, sent in answers) < BODY_BYTES // 4, [sent for *_, sent in answers]
    after, _ = memory_mib(worker)
    assert after - before <= 50, (before, after)


@pytest.mark.parametrize("server", [{"MAILSERVICE_RATE_LIMIT": "2/d"}], indirect=True)
def test_batches_over_the_rate_limit_are_429_without_their_bodies_being_read(server):
    key = ApiKeyFactory(domain=DomainFactory(name="acme.example.com"))
    headers = {"Authorization": f"Bearer {key.secret}"}
    warm(server.port, headers)
    warm(server.port, headers)  # the client's two requests of the minute
    worker = worker_pid(server.pid)
    before, _ = memory_mib(worker)

    answers = attack(server.port, headers, 10)

    assert [(status, body["error"]["code"]) for status, body, _ in answers] == [(429, "RateLimited")] * 10
    assert max(sent for *_, sent in answers) < BODY_BYTES // 4
    after, _ = memory_mib(worker)
    assert after - before <= 50, (before, after)


def batch_body() -> tuple[int, Iterator[bytes]]:
    """A valid batch of 500 sends just under 40 MiB, and its bytes item by item (never held whole)."""
    item = json.dumps(
        {
            "from": "Acme <hello@acme.example.com>",
            "to": "bob@example.org",
            "subject": "Hi",
            "text": "x" * 41_000,
            "html": "<p>" + "y" * 41_000 + "</p>",
        }
    ).encode()
    prefix, suffix, count = b'{"messages": [', b"]}", 500
    size = len(prefix) + count * len(item) + (count - 1) + len(suffix)
    assert 39 * MIB < size <= BODY_BYTES

    def chunks() -> Iterator[bytes]:
        yield prefix
        for index in range(count):
            yield (b"," if index else b"") + item
        yield suffix

    return size, chunks()


def test_3_concurrent_authenticated_40_mib_batches_grow_the_workers_peak_by_at_most_400_mib(server):
    key = ApiKeyFactory(domain=DomainFactory(name="acme.example.com"))
    headers = {"Authorization": f"Bearer {key.secret}", "Content-Type": "application/json"}
    warm(server.port, headers)
    worker = worker_pid(server.pid)
    before, _ = memory_mib(worker)

    def post() -> httpx.Response:
        size, chunks = batch_body()
        return httpx.post(
            f"http://127.0.0.1:{server.port}{BATCH_PATH}",
            content=chunks,
            headers=headers | {"Content-Length": str(size)},
            timeout=DEADLINE,
        )

    with ThreadPoolExecutor(3) as pool:
        responses = list(pool.map(lambda _: post(), range(3)))

    assert [response.status_code for response in responses] == [200] * 3, [r.text[:200] for r in responses]
    assert Message.objects.count() == 1500
    _, peak = memory_mib(worker)
    assert peak - before <= 400, (before, peak)

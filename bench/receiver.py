"""`python -m bench.receiver --port N`: an HTTP/1.1 webhook receiver that checks every POST's Standard Webhooks
signature and answers 204, keeping connections alive when the client does.

The peer of the webhooks scenario, in a process of its own so its CPU time can be read from /proc (a receiver
near 100% of a core is the bottleneck). `POST /configure` with a JSON list of the endpoints' secrets (the
endpoint `/hook/<i>` is signed with the i-th) starts a count over; `GET /stats` reads it: deliveries with a
valid signature, invalid ones, webhook-ids seen twice on one endpoint, and the wall-clock times of the first
and last valid one.
"""

import argparse
import asyncio
import json
import time

from standardwebhooks import Webhook, WebhookVerificationError

from bench.sink import serve_until_signalled

MAX_BODY = 1_000_000  # a bench peer, but still bounded


class Receiver:
    def __init__(self) -> None:
        self.configure([])

    def configure(self, secrets: list[str]) -> None:
        self.verifiers = [Webhook(secret) for secret in secrets]
        self.valid = self.invalid = self.duplicates = 0
        self.first = self.last = 0.0
        self.seen: set[tuple[str, str]] = set()

    def stats(self) -> dict:
        keys = ("valid", "invalid", "duplicates", "first", "last")
        return {key: getattr(self, key) for key in keys}

    def deliver(self, path: str, headers: dict[str, str], body: bytes) -> None:
        index = path.removeprefix("/hook/")
        try:
            self.verifiers[int(index)].verify(body, headers, json_parse=False)
        except (ValueError, IndexError, WebhookVerificationError):
            self.invalid += 1
            return
        key = (index, headers.get("webhook-id", ""))
        self.duplicates += key in self.seen
        self.seen.add(key)
        self.last = time.time()
        self.first = self.first or self.last
        self.valid += 1

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[str, bytes]:
        if method == "GET" and path == "/stats":
            return "200 OK", json.dumps(self.stats()).encode()
        if method == "POST" and path == "/configure":
            self.configure(json.loads(body))
            return "204 No Content", b""
        if method == "POST" and path.startswith("/hook/"):
            self.deliver(path, headers, body)
            return "204 No Content", b""
        return "404 Not Found", b""

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                request_line, *lines = head.decode("latin-1").split("\r\n")
                method, path, _ = request_line.split(" ", 2)
                headers = {}
                for line in lines:
                    name, _, value = line.partition(":")
                    if name:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0"))
                if not 0 <= length <= MAX_BODY:
                    break
                body = await reader.readexactly(length)
                status, content = self.answer(method, path, headers, body)
                close = headers.get("connection", "").lower() == "close"
                writer.write(
                    f"HTTP/1.1 {status}\r\nContent-Length: {len(content)}\r\n".encode()
                    + (b"Connection: close\r\n" if close else b"")
                    + b"\r\n"
                    + content
                )
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ValueError):
            pass
        finally:
            writer.close()


async def serve(port: int) -> None:
    receiver = Receiver()
    await serve_until_signalled(await asyncio.start_server(receiver.connection, host="127.0.0.1", port=port))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    asyncio.run(serve(parser.parse_args().port))

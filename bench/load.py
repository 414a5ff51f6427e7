"""An asyncio HTTP/1.1 load generator, closed-loop (fixed concurrency) or open-loop (fixed arrival rate).

Raw sockets rather than an HTTP client library: each request asks the server to close the
connection after its response, so each request is connect, write, read to EOF, and the generator's own
cost per request stays small next to the server's. Several processes can share one load; each
reports the CPU time it used, so a result says whether the generator was the bottleneck.
"""

import asyncio
import math
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from urllib.parse import urlsplit


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    requests: tuple[bytes, ...]  # cycled through, so a load can mix paths or bodies


def make_target(base_url: str, *, method: str, paths: list[str], token: str, body: bytes | None = None) -> Target:
    parts = urlsplit(base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    requests = []
    for path in paths:
        lines = [
            f"{method} {path} HTTP/1.1",
            f"Host: {host}:{port}",
            f"Authorization: Bearer {token}",
            "Connection: close",
        ]
        if body is not None:
            lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        requests.append(("\r\n".join(lines) + "\r\n\r\n").encode() + (body or b""))
    return Target(host=host, port=port, requests=tuple(requests))


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)  # seconds, successful (2xx) requests only
    statuses: Counter = field(default_factory=Counter)
    seconds: float = 0.0  # wall time the load ran
    client_cpu: list[float] = field(default_factory=list)  # per generator process, CPU seconds / wall seconds
    server_cpu: float = 0.0  # CPU seconds the server's processes used meanwhile, when the caller measured it

    @property
    def ok(self) -> int:
        return len(self.latencies)

    @property
    def errors(self) -> int:
        return sum(self.statuses.values()) - self.ok

    @property
    def throughput(self) -> float:
        """Successful requests per second."""
        return self.ok / max(self.seconds, 1e-9)

    @property
    def server_cpu_ms(self) -> float:
        """The server's CPU milliseconds per successful request."""
        return self.server_cpu * 1000 / max(self.ok, 1)

    @property
    def per_core(self) -> float:
        """Successful requests per CPU second of the server: its requests per second on one core."""
        return self.ok / max(self.server_cpu, 1e-9)

    def percentile_ms(self, q: float) -> float:
        """Nearest-rank percentile of the successful requests' latency, in milliseconds."""
        if not self.latencies:
            return math.nan
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))] * 1000

    def merge(self, other: "LoadResult", *, concurrent: bool = False) -> None:
        """Add another load's requests: one that ran at the same time (another generator
        process), or one that ran after this one (another round)."""
        self.latencies += other.latencies
        self.statuses += other.statuses
        self.seconds = max(self.seconds, other.seconds) if concurrent else self.seconds + other.seconds
        self.client_cpu += other.client_cpu
        self.server_cpu += other.server_cpu

    def describe_errors(self) -> str:
        failed = {status: count for status, count in self.statuses.items() if not 200 <= status < 300}
        return ", ".join(f"{count}× {status or 'connection error'}" for status, count in sorted(failed.items()))


async def _request(target: Target, index: int) -> int:
    reader, writer = await asyncio.open_connection(target.host, target.port)
    try:
        writer.write(target.requests[index % len(target.requests)])
        response = await reader.read()
    finally:
        writer.close()
    return int(response[9:12]) if response.startswith(b"HTTP/1.") else 0


async def _timed(target: Target, index: int, start: float, result: LoadResult) -> None:
    try:
        status = await _request(target, index)
    except OSError:
        status = 0
    result.statuses[status] += 1
    if 200 <= status < 300:
        result.latencies.append(time.perf_counter() - start)


async def _closed_loop(target: Target, total: int, concurrency: int, offset: int) -> LoadResult:
    result, next_index = LoadResult(), iter(range(offset, offset + total))

    async def worker() -> None:
        for index in next_index:
            await _timed(target, index, time.perf_counter(), result)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return result


async def _open_loop(target: Target, total: int, rate: float, offset: int) -> LoadResult:
    """Requests start on a fixed schedule whatever the server does; latency counts from the
    scheduled start, so a stalled server shows up in the percentiles (no coordinated omission)."""
    result, tasks, origin = LoadResult(), [], time.perf_counter()
    for i in range(total):
        scheduled = origin + i / rate
        await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))
        tasks.append(asyncio.create_task(_timed(target, offset + i, scheduled, result)))
    await asyncio.gather(*tasks)
    return result


def _run_in_process(target: Target, total: int, concurrency: int, rate: float | None, offset: int) -> LoadResult:
    cpu_start, wall_start = time.process_time(), time.perf_counter()
    if rate is None:
        result = asyncio.run(_closed_loop(target, total, concurrency, offset))
    else:
        result = asyncio.run(_open_loop(target, total, rate, offset))
    result.seconds = time.perf_counter() - wall_start
    result.client_cpu.append((time.process_time() - cpu_start) / result.seconds)
    return result


def run_load(
    target: Target, *, total: int, concurrency: int = 1, rate: float | None = None, processes: int = 1
) -> LoadResult:
    """`total` requests at `concurrency` in flight (or at `rate` per second), split over `processes`."""
    if processes == 1:
        return _run_in_process(target, total, concurrency, rate, 0)
    share = math.ceil(total / processes)
    with ProcessPoolExecutor(processes) as pool:
        futures = [
            pool.submit(
                _run_in_process,
                target,
                min(share, total - i * share),
                max(1, concurrency // processes),
                rate / processes if rate else None,
                i * share,
            )
            for i in range(processes)
        ]
        merged = LoadResult()
        for future in futures:
            merged.merge(future.result(), concurrent=True)
    return merged

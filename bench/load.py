"""HTTP load for the benchmarks: wrk for closed loops (fixed concurrency), an asyncio generator for open loops.

Closed loops run Debian's `wrk` (C, 0.06 to 0.12 ms of CPU a request against this module's asyncio
generator's 0.24 to 0.43, so the driver cannot cap a fast server): `run_wrk` writes a Lua script that sets
the request and prints a JSON summary (completed requests, errors, the latency histogram) from wrk's
`done()` hook, and parses it into the same LoadResult. wrk runs for a duration, not a count: it has no way
to stop after N requests and still time the run. wrk has no open loop (wrk2, which has, is not in Debian),
so fixed arrival rates stay on the asyncio generator (`run_load`), which is also the small loader of
scenarios that only need requests made (list pages at concurrency 1, the memory scenario's sends).

Both drivers ask the server to close the connection after each response (`Connection: close`), so each
request is connect, write, read, close: a gunicorn sync worker (the fixed references) serves one request a
connection whatever the client asks, and a product server kept alive would skip work the references cannot,
so the ratio would lie. The asyncio generator's processes, and wrk, report the CPU time they used, so a
result says whether the driver was the bottleneck.
"""

import asyncio
import json
import math
import os
import subprocess
import tempfile
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from urllib.parse import urlsplit

from bench.stack import BenchError

# A status wrk counts without telling which: it reports only how many responses had a status above 399.
WRK_ERROR_STATUS = 1


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    method: str
    paths: tuple[str, ...]  # cycled through by run_load, so a load can mix pages
    headers: tuple[tuple[str, str], ...]  # besides Host, Content-Length and Connection: close
    body: bytes | None

    @cached_property
    def requests(self) -> tuple[bytes, ...]:
        """Each path's request as sent on the wire, rendered once (run_load's generator sends these)."""
        rendered = []
        for path in self.paths:
            lines = [f"{self.method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: close"]
            lines += [f"{name}: {value}" for name, value in self.headers]
            if self.body is not None:
                lines.append(f"Content-Length: {len(self.body)}")
            rendered.append(("\r\n".join(lines) + "\r\n\r\n").encode() + (self.body or b""))
        return tuple(rendered)


def make_target(base_url: str, *, method: str, paths: list[str], token: str, body: bytes | None = None) -> Target:
    parts = urlsplit(base_url)
    headers = [("Authorization", f"Bearer {token}")]
    if body is not None:
        headers.append(("Content-Type", "application/json"))
    return Target(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 80,
        method=method,
        paths=tuple(paths),
        headers=tuple(headers),
        body=body,
    )


@dataclass
class LoadResult:
    # Seconds: run_load's successful (2xx) requests; run_wrk's corrected histogram (see _WRK_DONE).
    latencies: list[float] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    seconds: float = 0.0  # wall time the load ran
    client_cpu: list[float] = field(default_factory=list)  # per generator process, CPU seconds / wall seconds
    client_cpu_seconds: float = 0.0  # CPU seconds the generator processes used in all
    server_cpu: float = 0.0  # CPU seconds the server's processes used meanwhile, when the caller measured it

    @property
    def ok(self) -> int:
        return sum(count for status, count in self.statuses.items() if 200 <= status < 300)

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
    def client_cpu_ms(self) -> float:
        """The load generator's CPU milliseconds per successful request."""
        return self.client_cpu_seconds * 1000 / max(self.ok, 1)

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
        self.client_cpu_seconds += other.client_cpu_seconds
        self.server_cpu += other.server_cpu

    def describe_errors(self) -> str:
        names = {0: "connection error", WRK_ERROR_STATUS: "4xx or 5xx"}
        failed = {status: count for status, count in self.statuses.items() if not 200 <= status < 300}
        return ", ".join(f"{count}× {names.get(status, status)}" for status, count in sorted(failed.items()))


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
    result.client_cpu_seconds = time.process_time() - cpu_start
    result.client_cpu.append(result.client_cpu_seconds / result.seconds)
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


def _lua_string(value: bytes) -> str:
    """A Lua string literal of any bytes: every byte a three-digit decimal escape, so nothing needs quoting."""
    return '"' + "".join(f"\\{byte:03d}" for byte in value) + '"'


# wrk calls done() once at the end with its summary and its latency histogram (`latency(i)` is the i-th
# distinct value in microseconds and its count), printed whole so rounds merge exactly. wrk has already
# corrected the histogram for coordinated omission: a response slower than twice the mean cycle also counts
# the requests its connection would have sent meanwhile, at the latencies they would have seen.
_WRK_DONE = """
function done(summary, latency, requests)
  local buckets = {}
  for i = 1, #latency do
    local value, count = latency(i)
    buckets[i] = string.format("[%d,%d]", value, count)
  end
  local errors = summary.errors
  io.write(string.format(
    '\\nBENCH {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,'
      .. '"latency_us":[%s]}\\n',
    summary.requests, summary.duration, errors.connect, errors.read, errors.write, errors.status, errors.timeout,
    table.concat(buckets, ",")))
end
"""


def wrk_script(target: Target) -> str:
    """The Lua script for one target: its one request set statically (wrk formats it once, no Lua runs per
    request), and done()."""
    if len(target.paths) != 1:
        raise ValueError("run_wrk sends one request; a load that cycles paths runs on run_load")
    lines = [
        "-- Written by bench/load.py for one wrk run.",
        f"wrk.method = {_lua_string(target.method.encode())}",
        f"wrk.path = {_lua_string(target.paths[0].encode())}",
        *(
            f"wrk.headers[{_lua_string(name.encode())}] = {_lua_string(value.encode())}"
            for name, value in (("Connection", "close"), *target.headers)
        ),
    ]
    if target.body is not None:
        lines.append(f"wrk.body = {_lua_string(target.body)}")
    return "\n".join(lines) + "\n" + _WRK_DONE


def _parse_wrk(output: str) -> dict:
    for line in reversed(output.splitlines()):
        if line.startswith("BENCH {"):
            return json.loads(line.removeprefix("BENCH "))
    raise RuntimeError(f"wrk printed no summary:\n{output[-2000:]}")


def run_wrk(
    target: Target, *, seconds: int, concurrency: int, threads: int = 1, timeout_seconds: int = 30
) -> LoadResult:
    """`concurrency` connections, each sending its next request when the last is answered, for `seconds`,
    from `threads` wrk threads in one process. A request still in flight at the end is neither counted nor
    timed; one slower than `timeout_seconds` counts as an error."""
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="bench-wrk-") as script:
        script.write(wrk_script(target))
        script.flush()
        command = ["wrk", "--threads", str(threads), "--connections", str(max(concurrency, threads))]
        command += ["--duration", f"{seconds}s", "--timeout", f"{timeout_seconds}s", "--script", script.name]
        try:
            process = subprocess.Popen(
                [*command, f"http://{target.host}:{target.port}{target.paths[0]}"],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        except FileNotFoundError:
            raise BenchError("the closed loops need Debian's wrk: apt-get install wrk") from None
        assert process.stdout is not None
        output = process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"wrk exited with {process.returncode}:\n{output[-2000:]}")
    summary = _parse_wrk(output)
    result = LoadResult(seconds=summary["duration_us"] / 1e6)
    # wrk's corrected histogram, failed requests included: wrk does not say which were which, and a run with
    # any failure is reported as failed, so its percentiles are not read.
    for value, count in summary["latency_us"]:
        result.latencies += [value / 1e6] * count
    failed_status = summary["status"]
    result.statuses[200] = summary["requests"] - failed_status
    result.statuses[WRK_ERROR_STATUS] = failed_status
    result.statuses[0] = sum(summary[kind] for kind in ("connect", "read", "write", "timeout"))
    result.statuses = +result.statuses  # drop the zero counts
    result.client_cpu_seconds = usage.ru_utime + usage.ru_stime
    result.client_cpu.append(result.client_cpu_seconds / max(result.seconds, 1e-9))
    return result

"""Nodes apart on one machine: network namespaces joined by a bridge, each node one veth with a
127.77.0.x address, and the faults a network between them has (a node cut off, latency and loss).

Linux gives every new namespace a loopback that owns all of 127.0.0.0/8, so a packet to another
node's 127.77.0.x would never leave it: each node's loopback keeps 127.0.0.1 alone, and
`route_localnet` lets 127/8 addresses travel over the veth. The bridge lives in a namespace of its
own (the switch), so the root namespace, which other tests share, is never changed. Deleting the
namespaces deletes their veths, the bridge and the iptables rules inside them: nothing is left in
the root namespace.

Needs root and iproute2's `ip` (and iptables for the faults). One topology at a time on a machine:
every name starts with PREFIX, and `Network.start` removes what an earlier run that was killed left.
"""

import asyncio
import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field

PREFIX = "msn-"
SWITCH = f"{PREFIX}switch"
SUBNET = "127.77.0"
CLONE_NEWNET = 0x40000000  # setns(2): the network namespace


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def in_netns(netns: str, *command: str) -> None:
    subprocess.run(["ip", "netns", "exec", netns, *command], check=True, capture_output=True, text=True)


def _setns(path: str) -> None:
    """Move the calling thread into the network namespace at `path` (sockets it opens from now on live there)."""
    libc = ctypes.CDLL(None, use_errno=True)
    descriptor = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(descriptor, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {path}")
    finally:
        os.close(descriptor)


def remove_leftovers() -> list[str]:
    """Kill the processes of, and delete, every namespace an earlier run left; their names."""
    names = [line.split()[0] for line in _ip("netns", "list").splitlines() if line.startswith(PREFIX)]
    for name in names:
        for pid in _ip("netns", "pids", name).split():
            with suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        _ip("netns", "delete", name)
    return names


@dataclass
class Network:
    """Namespaces on one bridge; `add_node` names them, `enter` moves the calling thread into one."""

    nodes: dict[str, str] = field(default_factory=dict)  # namespace -> address
    leftovers: list[str] = field(default_factory=list)
    root: int | None = None  # a descriptor of the namespace the starting thread was in, to return to

    def netns(self, node: str) -> str:
        return f"{PREFIX}{node}"

    def start(self) -> None:
        self.leftovers = remove_leftovers()
        self.root = os.open(f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net", os.O_RDONLY)
        _ip("netns", "add", SWITCH)
        _ip("-n", SWITCH, "link", "add", "bridge0", "type", "bridge")
        _ip("-n", SWITCH, "link", "set", "bridge0", "up")

    def add_node(self, node: str, number: int) -> str:
        """A namespace with a veth on the bridge at 127.77.0.`number`; its address."""
        netns, address = self.netns(node), f"{SUBNET}.{number}"
        _ip("netns", "add", netns)
        _ip("link", "add", netns, "type", "veth", "peer", "name", "eth0", "netns", netns)
        _ip("link", "set", netns, "netns", SWITCH)
        _ip("-n", SWITCH, "link", "set", netns, "master", "bridge0", "up")
        _ip("-n", netns, "link", "set", "lo", "up")
        _ip("-n", netns, "address", "del", "127.0.0.1/8", "dev", "lo")
        _ip("-n", netns, "address", "add", "127.0.0.1/32", "dev", "lo")
        for interface in ("all", "eth0"):
            in_netns(netns, "sysctl", "-qw", f"net.ipv4.conf.{interface}.route_localnet=1")
        _ip("-n", netns, "address", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", netns, "link", "set", "eth0", "up")
        self.nodes[netns] = address
        return address

    def enter(self, node: str) -> None:
        """The calling thread's sockets from now on are the node's (Python 3.11 has no os.setns: libc's)."""
        _setns(f"/run/netns/{self.netns(node)}")

    def stop(self) -> None:
        """Back to the root namespace, then every namespace deleted (their processes must have stopped)."""
        if self.root is not None:
            ctypes.CDLL(None, use_errno=True).setns(self.root, CLONE_NEWNET)
            os.close(self.root)
            self.root = None
        remove_leftovers()

    def _iptables(self, node: str, action: str, peer: str, *match: str) -> None:
        netns = self.netns(node)
        in_netns(netns, "iptables", action, "OUTPUT", "-d", peer, *match, "-j", "DROP")
        in_netns(netns, "iptables", action, "INPUT", "-s", peer, *match, "-j", "DROP")

    def cut(self, node: str, peer: str) -> None:
        """Every packet between `node` and the address `peer` dropped, both ways (a partition: no RST, silence)."""
        self._iptables(node, "-A", peer)

    def mend(self, node: str, peer: str) -> None:
        self._iptables(node, "-D", peer)

    def lose(self, node: str, peer: str, probability: float, *, on: bool = True) -> None:
        """`probability` of the packets between `node` and `peer` dropped, each way (iptables statistic)."""
        match = ("-m", "statistic", "--mode", "random", "--probability", str(probability))
        self._iptables(node, "-A" if on else "-D", peer, *match)


class DelayProxy:
    """A TCP proxy in a node's namespace, on its 127.0.0.1:`port`, to `target`: while `delay` is set, each
    chunk the node sends waits that long before it goes on, as netem's `delay` on the node's egress would.

    It stands in for `tc qdisc … netem`, which a kernel without the sch_netem module (this machine's
    Firecracker VM) refuses ("Specified qdisc kind is unknown"). Chunks keep their order: one queue and
    one writer per direction of each connection."""

    def __init__(self, network: Network, node: str, port: int, target: tuple[str, int]) -> None:
        self.network, self.node, self.port, self.target = network, node, port, target
        self.delay = 0.0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"delay-proxy-{node}-{port}")

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"the delay proxy in {self.node} did not start")

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _run(self) -> None:
        self.network.enter(self.node)  # this thread only: its listening socket and connections are the node's
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._connection, "127.0.0.1", self.port))
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            server.close()

    async def _connection(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self._pipe(client_reader, server_writer, delayed=True),
            self._pipe(server_reader, client_writer, delayed=False),
            return_exceptions=True,
        )

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, delayed: bool) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def forward() -> None:
            while True:
                due, chunk = await queue.get()
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                if not chunk:
                    break
                writer.write(chunk)
                await writer.drain()

        forwarder = asyncio.create_task(forward())
        try:
            while chunk := await reader.read(65536):
                queue.put_nowait((time.monotonic() + (self.delay if delayed else 0.0), chunk))
        finally:
            queue.put_nowait((time.monotonic() + (self.delay if delayed else 0.0), b""))
            with suppress(OSError):
                await forwarder
            writer.close()


@contextmanager
def delay_proxy(network: Network, node: str, port: int, target: tuple[str, int]) -> Iterator[DelayProxy]:
    proxy = DelayProxy(network, node, port, target)
    proxy.start()
    try:
        yield proxy
    finally:
        proxy.stop()

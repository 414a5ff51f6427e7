"""The Django cache's Redis backend with one connection pool and one client per process.

Django keeps a cache object per thread, each with connection pools of its own, and makes a new
redis.Redis for every operation. Both cost more than the command:
- A thread that lives for one batch (direct delivery's lanes: one a destination, a batch) opened a new
  connection to Redis for its first cache read and left it to the garbage collector: a TCP connect,
  redis-py's CLIENT SETINFO round trips, and Redis's own work for each new client.
- redis-py 8's constructor sets some 170 response callbacks: measured here, a warm cache.get took
  0.19 ms of CPU, and 0.055 ms with the client made once.
redis-py's pool and client are thread-safe, and the pool starts afresh in a forked child (it checks the
process id), so every thread of the process shares them.

The pool blocks: a thread finding all of its CONNECTIONS in use waits for one (up to WAIT_SECONDS)
rather than failing. Hundreds of lane threads, each holding a connection from its command until it
gets the GIL back to read the reply, went past redis-py's default cap of 100 and raised "Too many
connections". The fleet's limits (messaging/outbound/fleet_limits.py) use `process_client` too.
"""

import threading
from typing import Any

import redis
from django.core.cache.backends.redis import RedisCache, RedisCacheClient

CONNECTIONS = 100  # per process
WAIT_SECONDS = 2.0

_clients: dict[tuple[str, str], redis.Redis] = {}
_clients_lock = threading.Lock()


def process_client(url: str, **options: Any) -> redis.Redis:
    """The process's client of the Redis at `url` with these pool options (made on first use)."""
    key = (url, repr(sorted(options.items())))
    with _clients_lock:
        if key not in _clients:
            pool = redis.BlockingConnectionPool.from_url(
                url, **{"max_connections": CONNECTIONS, "timeout": WAIT_SECONDS, **options}
            )
            _clients[key] = redis.Redis(connection_pool=pool)
        return _clients[key]


class _ProcessCacheClient(RedisCacheClient):
    """One server (REDIS_URL), no OPTIONS: every operation goes through the process's client."""

    def __init__(self, servers: list[str]) -> None:
        super().__init__(servers)
        self._process_client = process_client(servers[0])

    def get_client(self, key: str | bytes | memoryview | None = None, *, write: bool = False) -> redis.Redis:
        return self._process_client


class ProcessRedisCache(RedisCache):
    """CACHES' backend with REDIS_URL: Django's RedisCache over the process's client."""

    def __init__(self, server: str, params: dict[str, Any]) -> None:
        super().__init__(server, params)
        self._class = _ProcessCacheClient

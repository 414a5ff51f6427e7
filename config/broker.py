"""The Celery broker transport: kombu's Redis transport, its channels keeping one Redis client.

kombu's Redis channel builds a new `redis.Redis` for every publish that is not given one, and
redis-py 8 inspects its own signature on each construction: on POST /v1/send, whose one publish
is the dispatch after commit, that was 12% of a web worker's CPU
(bench/results/before-after-accept-round-three.md). The client kept here uses the channel's
own connection pool, as the ones kombu builds do, and is rebuilt when the channel replaces that pool.
"""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _kept_client: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        if client:
            yield client
            return
        if self._kept_client is None or self._kept_client.connection_pool is not self.pool:
            self._kept_client = self._create_client()  # type: ignore[attr-defined]  # kombu's, not in its stubs
        yield self._kept_client


class Transport(kombu_redis.Transport):
    Channel = Channel

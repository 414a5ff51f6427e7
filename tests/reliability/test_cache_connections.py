"""Threads that come and go (direct delivery's lanes, one a destination, a batch) read the cache over
the process's Redis connections, not a new one each, and more at once than there are connections wait
for one (mailservice/redis_pool.py)."""

import threading
import uuid

import pytest
import redis
from django.conf import settings
from django.core.cache import caches

from mailservice.redis_pool import process_client

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis cache")


def redis_client_id_in_new_thread() -> int:
    """Redis's id for the connection a new thread's cache object reads over."""
    found: list[int] = []

    def read() -> None:
        caches["default"].get("tests:cache-connections")
        found.append(caches["default"]._cache.get_client().client_id())

    thread = threading.Thread(target=read)
    thread.start()
    thread.join()
    return found[0]


def test_threads_one_after_another_share_one_redis_connection():
    ids = {redis_client_id_in_new_thread() for _ in range(10)}
    assert len(ids) == 1


def test_threads_at_once_each_get_a_working_connection():
    barrier = threading.Barrier(8)
    values: list[object] = []

    def read(number: int) -> None:
        barrier.wait(timeout=5)
        caches["default"].set(f"tests:cache-connections:{number}", number, timeout=30)
        values.append(caches["default"].get(f"tests:cache-connections:{number}"))

    threads = [threading.Thread(target=read, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(values) == list(range(8))


def test_more_threads_at_once_than_the_pool_has_connections_wait_for_one():
    client = process_client(settings.REDIS_URL, max_connections=2)
    key = f"tests:cache-connections:{uuid.uuid4()}"
    outcomes: list[object] = []

    def hold_a_connection() -> None:
        try:  # BLPOP on an empty list holds its connection for the timeout
            outcomes.append(client.blpop([key], timeout=0.3))
        except redis.RedisError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=hold_a_connection) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert outcomes == [None] * 6  # each timed out empty-handed; none found the pool full

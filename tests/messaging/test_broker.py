"""config/broker.py: the broker transport's channels publish through one Redis client."""

import uuid

import pytest
from django.conf import settings
from kombu import Connection

from mailservice.ratelimit import shared_redis

pytestmark = pytest.mark.skipif(not settings.REDIS_URL, reason="the Redis broker transport")


def test_a_channel_publishes_every_message_through_one_client():
    queue = f"test-broker-{uuid.uuid4().hex}"
    with Connection(settings.CELERY_BROKER_URL, transport="config.broker:Transport") as connection:
        channel = connection.default_channel
        producer = connection.Producer(channel)
        clients = set()
        for n in range(3):
            producer.publish({"n": n}, routing_key=queue, declare=[connection.SimpleQueue(queue).queue])
            clients.add(id(channel._kept_client))
        received = [connection.SimpleQueue(queue).get(timeout=5).payload["n"] for _ in range(3)]
    shared_redis().delete(queue)

    assert len(clients) == 1
    assert sorted(received) == [0, 1, 2]

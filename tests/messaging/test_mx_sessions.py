"""Direct delivery's sessions kept open between batches (messaging/outbound/direct/sessions.py): real SMTP
receivers on loopback count the connections they accept, DNS is published on loopback as in
test_mx_delivery.py, and each batch is dispatched in-process as a worker's would be."""

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import EventType, Message, Status
from messaging.outbound.direct.destinations import destination_status
from messaging.outbound.direct.sessions import idle_sessions
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.transports import close_transports
from tests.factories import MessageFactory
from tests.harness import wait_until
from tests.messaging.test_mx_delivery import dispatched, mx

pytestmark = pytest.mark.django_db


def batch(*recipients: str) -> list[Message]:
    """One batch: a message to each recipient, dispatched together."""
    due = timezone.now() - timedelta(seconds=1)
    messages = [MessageFactory(to=[recipient], next_attempt_at=due) for recipient in recipients]
    assert dispatch_batch() == len(messages)
    return list(Message.objects.filter(pk__in=[message.pk for message in messages]))


def open_slots(destination: str) -> int | None:
    return destination_status(destination)["connections_open"]


def test_two_batches_to_one_destination_use_one_connection_until_the_worker_stops(zone, receivers, settings):
    settings.MAILSERVICE_MX_CONNECTIONS = 5
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")

    first, second = batch("a@example.test", "b@example.test"), batch("c@example.test")

    assert {message.status for message in first + second} == {Status.DELIVERED}
    assert (len(receiver.received), receiver.connections) == (3, 1)
    assert len(idle_sessions) == 1 and open_slots("example.test") in (1, None)  # None: no Redis
    close_transports()  # a worker's shutdown
    assert len(idle_sessions) == 0 and open_slots("example.test") in (0, None)


def test_a_session_the_receiver_dropped_while_idle_costs_a_reconnect_not_a_failure(zone, receivers):
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2", idle_timeout=0.3)
    assert dispatched("a@example.test").status == Status.DELIVERED

    # The receiver closes the idle session; this side's pool still holds it.
    wait_until(lambda: receiver.disconnections == 1, timeout=10, message="the receiver to drop the idle session")
    assert len(idle_sessions) == 1
    message = dispatched("b@example.test")

    assert message.status == Status.DELIVERED and message.attempts == 1
    assert list(message.events.values_list("type", flat=True)) == [EventType.DELIVERED]
    assert (len(receiver.received), receiver.connections) == (2, 2)


def test_an_idle_session_is_closed_after_its_idle_time_and_gives_back_its_slot(zone, receivers, settings):
    settings.MAILSERVICE_MX_SESSION_IDLE_SECONDS = 0.3
    settings.MAILSERVICE_MX_CONNECTIONS = 5
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")
    assert dispatched("a@example.test").status == Status.DELIVERED
    assert len(idle_sessions) == 1

    deadline = time.monotonic() + 3
    while len(idle_sessions) and time.monotonic() < deadline:
        time.sleep(0.05)

    assert len(idle_sessions) == 0 and open_slots("example.test") in (0, None)
    assert dispatched("b@example.test").status == Status.DELIVERED
    assert receiver.connections == 2


@pytest.mark.parametrize(("per_session", "connections"), [(2, 3), (5, 1)])
def test_a_session_carries_at_most_its_messages_within_and_across_batches(
    zone, receivers, settings, per_session, connections
):
    settings.MAILSERVICE_MX_SESSION_MESSAGES = per_session
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    receiver = receivers("127.0.0.2")

    batch("a@example.test", "b@example.test", "c@example.test")
    batch("d@example.test", "e@example.test")

    assert (len(receiver.received), receiver.connections) == (5, connections)
    peers = [received.peer for received in receiver.received]
    assert max(peers.count(peer) for peer in set(peers)) == per_session


def test_the_connection_cap_counts_idle_sessions_and_a_batch_at_the_cap_takes_an_idle_ones_slot(
    zone, receivers, settings
):
    settings.MAILSERVICE_MX_CONNECTIONS = 1
    mx(zone, "one.test", (10, "mx1.provider.test", "127.0.0.2"))
    mx(zone, "two.test", (10, "mx2.provider.test", "127.0.0.3"))
    first, second = receivers("127.0.0.2"), receivers("127.0.0.3")

    # Each is delivered by its first batch: at the cap, the batch closes the process's idle session to the
    # destination and takes its slot, rather than putting the message back.
    for recipient in ("a@one.test", "b@two.test", "c@one.test"):
        assert dispatched(recipient).status == Status.DELIVERED
        assert len(idle_sessions) == 1 and open_slots("provider.test") in (1, None)  # None: no Redis

    assert (first.connections, second.connections) == (2, 1)

"""Greylisting against the real thing (issue 40, item 2): Debian's postgrey as the policy service of a
Postfix MX (tests/harness/postgrey.py, tests/harness/postfix.py), reached by direct delivery through the
test's DNS server. Every recipient's triplet is new, so each message is greylisted once: all of them
wait the one delay side by side, none is charged for it, and each is delivered once.

postgrey runs with a delay of DELAY s (its default is 300 s: the same path, only slower) and dispatch
with MAILSERVICE_GREYLIST_DELAY a second longer; dispatch runs in-process, a batch whenever one is due."""

import time
from collections import Counter

import pytest
from django.utils import timezone

from messaging.models import EventType, Message, Status
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.domain_holds import held_destinations
from messaging.outbound.outcomes import GREYLIST_MARK
from tests.factories import DomainFactory, MessageFactory
from tests.harness import running, smtp_sink, wait_until
from tests.harness.postfix import PostfixServer
from tests.harness.postgrey import PostgreyServer
from tests.messaging.test_mx_delivery import mx

# Committed rows: a lane that outlasts its batch is recorded by the slow-lane recorder, a thread of its own.
pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DELAY = 4
RECIPIENTS = 6


def test_six_messages_greylisted_by_postgrey_wait_one_delay_together_and_use_one_attempt_each(zone, mx_port, settings):
    settings.MAILSERVICE_GREYLIST_DELAY = DELAY + 1
    mx(zone, "grey.test", (10, "mx.grey.test", "127.0.0.2"))
    domain = DomainFactory()
    messages = [
        MessageFactory(domain=domain, to=[f"user{n}@grey.test"], next_attempt_at=timezone.now())
        for n in range(RECIPIENTS)
    ]
    with (
        smtp_sink() as sink,
        running(PostgreyServer(delay=DELAY)) as postgrey,
        running(
            PostfixServer(
                host="127.0.0.2",
                port=mx_port,
                next_hop=f"127.0.0.1:{sink.port}",
                domains=("grey.test",),
                policy_service=postgrey.address,
            )
        ) as server,
    ):
        started = time.monotonic()
        dispatch_batch()
        assert "grey.test" not in held_destinations()

        def all_delivered() -> bool:
            dispatch_batch()  # whatever is due: nothing until the greylist delay has passed
            return not Message.objects.filter(domain=domain).exclude(status=Status.DELIVERED).exists()

        wait_until(all_delivered, timeout=DELAY + 60, interval=0.5, message="every greylisted message delivered")
        took = time.monotonic() - started
        wait_until(lambda: len(sink.received) >= RECIPIENTS, timeout=10, message="Postfix to pass them on")

    assert "Greylisted, see http://postgrey.schweikert.ch/help/grey.test.html" in server.log()
    assert Counter(r for arrival in sink.received for r in arrival.rcpt_tos) == {
        f"user{n}@grey.test": 1 for n in range(RECIPIENTS)
    }
    for message in messages:
        message.refresh_from_db()
        assert message.attempts == 1  # only the attempt that delivered it
        [greylisted] = message.events.filter(type=EventType.DEFERRED)
        assert GREYLIST_MARK in greylisted.detail and greylisted.enhanced_status == "4.2.0"
    # One delay for all of them, not one after another: the first try, the delay, and the retry.
    assert took < DELAY + 1 + 15, f"{RECIPIENTS} greylisted messages took {took:.1f} s"

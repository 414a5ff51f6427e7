"""Greylisting (issue 40, item 2; messaging/outbound/greylisting.py): recognised from the replies of the
common implementations, a greylisted message waits MAILSERVICE_GREYLIST_DELAY on its own, the other
messages of its destination flow on, and its first greylisting uses no attempt. Dispatch runs
in-process against a real SMTP server (aiosmtpd on loopback) answering RCPT as postgrey has Postfix do."""

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.models import Domain
from messaging.models import EventType, Message, Status
from messaging.outbound.dispatch import dispatch_batch
from messaging.outbound.domain_holds import held_destinations
from messaging.outbound.envelope import Reply
from messaging.outbound.greylisting import is_greylisting
from messaging.outbound.outcomes import GREYLIST_MARK
from messaging.outbound.provider_rules import is_throttle
from tests.factories import MessageFactory

pytestmark = pytest.mark.django_db

POSTGREY = "450 4.2.0 <grey@example.org>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/example.org.html"
DELAY = 300


@pytest.mark.parametrize(
    ("reply", "greylisting"),
    [
        (POSTGREY, True),
        ("451 4.7.1 Greylisting in action, please come back later", True),  # milter-greylist
        (
            "450 4.7.1 <a@example.org>: Greylisted by greyfix 0.4.0, try again in 30 seconds",
            True,
        ),
        ("451 4.7.1 Try again later", True),  # rspamd's soft reject through its milter
        ("451 Temporary failure, please try again later.", True),  # OpenBSD spamd
        ("450 Greylisting in progress, please try again later", True),  # Exim's DbLessGreyListing
        ("450 4.7.1 Error: too much mail from 127.0.0.1", False),  # Postfix's rate limit: a slow-down
        ("421 4.7.0 Try again later, closing connection.", False),  # Gmail's unusual rate
        ("451 4.7.500 Server busy. Please try again later", False),  # Microsoft's throttling
        ("451 4.3.0 Error: queue file write error", False),
        ("550 5.7.1 greylisted forever", False),  # a refusal for good is no greylisting
    ],
)
def test_greylisting_replies_are_recognised_and_are_no_slow_down(reply, greylisting):
    parsed = Reply(int(reply[:3]), reply[4:])
    assert is_greylisting(parsed) is greylisting
    if greylisting:
        assert not is_throttle(parsed)


@pytest.fixture
def sink(settings, live_sink):
    settings.EMAIL_URL = live_sink.url
    settings.MAILSERVICE_GREYLIST_DELAY = DELAY
    return live_sink


def due(domain: Domain, recipient: str) -> Message:
    return MessageFactory(domain=domain, to=[recipient], next_attempt_at=timezone.now() - timedelta(seconds=1))


def fresh(message: Message) -> Message:
    message.refresh_from_db()
    return message


def due_now(message: Message) -> None:
    """The greylist delay has passed (without waiting it out)."""
    Message.objects.filter(pk=message.pk).update(next_attempt_at=timezone.now())


def test_a_greylisted_message_waits_its_delay_alone_and_its_first_greylisting_costs_no_attempt(sink, domain):
    sink.behaviour.rejected_rcpts = {"grey@example.org": POSTGREY}
    grey = due(domain, "grey@example.org")
    others = [due(domain, f"user{n}@example.org") for n in range(3)]

    dispatch_batch()

    grey = fresh(grey)
    assert (grey.status, grey.attempts) == (Status.ACCEPTED, 0)
    assert timedelta(seconds=DELAY - 10) < grey.next_attempt_at - timezone.now() <= timedelta(seconds=DELAY)
    event = grey.events.get()
    assert (event.type, event.smtp_code, event.enhanced_status) == (EventType.DEFERRED, 450, "4.2.0")
    assert event.detail.startswith(f"attempt 1, {GREYLIST_MARK}: 450 4.2.0 ")
    assert [fresh(m).status for m in others] == [Status.DELIVERED] * 3
    assert "example.org" not in held_destinations()  # the destination is not held: the next one goes at once
    late = due(domain, "late@example.org")
    assert dispatch_batch() == 1
    assert fresh(late).status == Status.DELIVERED

    sink.behaviour.rejected_rcpts = {}  # the delay has passed: postgrey knows the triplet
    due_now(grey)
    dispatch_batch()

    grey = fresh(grey)
    assert (grey.status, grey.attempts) == (Status.DELIVERED, 1)  # only the attempt that delivered it
    assert [r.rcpt_tos for r in sink.received].count(["grey@example.org"]) == 1


def test_a_second_greylisting_uses_an_attempt_and_waits_the_same_delay(sink, domain):
    sink.behaviour.rejected_rcpts = {"grey@example.org": POSTGREY}
    grey = due(domain, "grey@example.org")
    dispatch_batch()
    due_now(grey)

    dispatch_batch()

    grey = fresh(grey)
    assert (grey.status, grey.attempts) == (Status.ACCEPTED, 1)
    assert timedelta(seconds=DELAY - 10) < grey.next_attempt_at - timezone.now() <= timedelta(seconds=DELAY)
    assert grey.events.latest("id").detail.startswith("attempt 1: greylisted again: 450 4.2.0 ")


@pytest.mark.parametrize(("worked_after", "next_waits"), [(2 * DELAY, 2 * DELAY), (100 * DELAY, 4 * DELAY)])
def test_the_delay_that_worked_for_a_domain_is_what_its_next_greylisted_message_waits(
    sink, domain, worked_after, next_waits
):
    """Item 2's "then what worked for that destination": a receiver whose delay is longer than the default
    greylists the first retry again; the time that delivered the message is learned for the domain, at most
    LEARNED_MAX_FACTOR times the default."""
    sink.behaviour.rejected_rcpts = {"grey@example.org": POSTGREY}
    grey = due(domain, "grey@example.org")
    dispatch_batch()
    # Its greylisting was `worked_after` seconds ago, and the receiver now knows the triplet.
    grey.events.update(created_at=timezone.now() - timedelta(seconds=worked_after))
    sink.behaviour.rejected_rcpts = {}
    due_now(grey)
    dispatch_batch()
    assert fresh(grey).status == Status.DELIVERED

    sink.behaviour.rejected_rcpts = {"next@example.org": POSTGREY.replace("grey@", "next@")}
    later = due(domain, "next@example.org")
    dispatch_batch()

    waits = fresh(later).next_attempt_at - timezone.now()
    assert timedelta(seconds=next_waits - 10) < waits <= timedelta(seconds=next_waits + 10)
    other = due(domain, "someone@elsewhere.example")  # another domain's receiver: the default
    sink.behaviour.rejected_rcpts = {"someone@elsewhere.example": POSTGREY}
    dispatch_batch()
    assert fresh(other).next_attempt_at - timezone.now() <= timedelta(seconds=DELAY)

"""The automatic pause: bounce and complaint rates over the recent-sends window, with minimum evidence.

The defaults: at least 100 sends in the window, and at least 5 recipients who bounced (3 who complained),
each counted once however many of its messages it reported."""

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.services import sending_pause
from messaging.models import Direction, EventType, Message, MessageEvent, Status
from messaging.safeguards import safeguard_check, sending_health
from tests.factories import DomainFactory, MessageFactory

_REPORTED = {Status.BOUNCED: EventType.BOUNCED, Status.COMPLAINED: EventType.COMPLAINED}


def sends(
    domain, count: int, status: str = Status.DELIVERED, age: timedelta = timedelta(0), recipient: str = ""
) -> None:
    """`count` sends; bounced or complained ones with the recipient's event (each its own recipient
    unless `recipient` is given), as reports record them."""
    messages = Message.objects.bulk_create(MessageFactory.build_batch(count, domain=domain, status=status))
    if age:
        Message.objects.filter(pk__in=[m.pk for m in messages]).update(created_at=timezone.now() - age)
    if status in _REPORTED:
        MessageEvent.objects.bulk_create(
            MessageEvent(message=message, type=_REPORTED[status], recipient=recipient or f"r{message.pk}@example.org")
            for message in messages
        )


@pytest.mark.parametrize(
    ("delivered", "bounced", "paused"),
    [
        (90, 9, False),  # 99 sends: below the minimum volume of 100, even at 9%
        (95, 5, False),  # 5 of 100 = 5%: at the limit
        (96, 4, False),  # 4 of 100: under the limit anyway
        (94, 6, True),  # 6 of 100 = 6%
        (120, 4, False),  # 4 of 124 = 3.2%
        (60, 40, True),  # 40%
    ],
)
def test_bounce_rate(domain, delivered, bounced, paused):
    sends(domain, delivered)
    sends(domain, bounced, Status.BOUNCED)
    assert safeguard_check(domain=domain) is paused
    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused) == (paused, paused)


@pytest.mark.parametrize(("delivered", "complained", "paused"), [(2997, 3, False), (997, 3, True), (500, 2, False)])
def test_complaint_rate_over_a_tenth_of_a_percent_with_three_complaints(
    domain, settings, delivered, complained, paused
):
    settings.MAILSERVICE_SAFEGUARD_WINDOW_SENDS = 3000
    sends(domain, delivered)
    sends(domain, complained, Status.COMPLAINED)
    assert safeguard_check(domain=domain) is paused
    if paused:
        domain.refresh_from_db()
        assert domain.pause_reason == (
            "Automatic pause: complaint rate 0.3% (3 recipients in the last 1000 sends) is over the 0.1% limit"
        )
        assert (domain.paused_by, domain.paused_at is not None) == ("safeguard", True)


def test_one_complaint_among_25_sends_does_not_pause(domain):
    sends(domain, 24)
    sends(domain, 1, Status.COMPLAINED)
    assert safeguard_check(domain=domain) is False


def test_complaints_are_counted_at_the_minimum_volume(domain):
    sends(domain, 97)
    sends(domain, 3, Status.COMPLAINED)
    assert safeguard_check(domain=domain) is True


def test_the_window_is_the_most_recent_sends(domain, settings):
    settings.MAILSERVICE_SAFEGUARD_WINDOW_SENDS = 100
    sends(domain, 10, Status.BOUNCED, age=timedelta(hours=1))  # older than the last 100 sends
    sends(domain, 100)
    assert sending_health(domain=domain).bounced == 0
    assert safeguard_check(domain=domain) is False


def test_the_window_ends_after_the_configured_hours(domain):
    sends(domain, 30, Status.BOUNCED, age=timedelta(hours=25))
    sends(domain, 100)
    assert (sending_health(domain=domain).sent, safeguard_check(domain=domain)) == (100, False)


def test_received_mail_and_other_domains_do_not_count(domain):
    sends(DomainFactory(), 30, Status.BOUNCED)
    MessageFactory.create_batch(30, domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED)
    sends(domain, 100)
    assert sending_health(domain=domain).sent == 100
    assert safeguard_check(domain=domain) is False


def test_an_already_paused_domain_keeps_its_reason(domain):
    sending_pause(domain=domain, actor="operator", reason="maintenance")
    sends(domain, 100, Status.BOUNCED)
    assert safeguard_check(domain=domain) is False
    domain.refresh_from_db()
    assert (domain.pause_reason, domain.auto_paused) == ("maintenance", False)


@pytest.mark.parametrize("status", [Status.COMPLAINED, Status.BOUNCED])
def test_one_recipient_reporting_many_messages_counts_once(domain, status):
    sends(domain, 90)
    sends(domain, 10, status, recipient="angry@example.org")  # 10% of the sends, all from one person
    assert (sending_health(domain=domain).complained, sending_health(domain=domain).bounced) == (
        (1, 0) if status == Status.COMPLAINED else (0, 1)
    )
    assert safeguard_check(domain=domain) is False


def test_a_bounce_the_relay_gave_at_dispatch_counts_once_per_message(domain):
    sends(domain, 94)
    messages = Message.objects.bulk_create(MessageFactory.build_batch(6, domain=domain, status=Status.BOUNCED))
    MessageEvent.objects.bulk_create(MessageEvent(message=m, type=EventType.BOUNCED, recipient="") for m in messages)
    assert sending_health(domain=domain).bounced == 6
    assert safeguard_check(domain=domain) is True

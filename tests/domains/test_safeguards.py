"""The automatic pause: bounce and complaint rates over the recent-sends window, with a minimum sample."""

from datetime import timedelta

import pytest
from django.utils import timezone

from domains.safeguards import safeguard_check, sending_health
from domains.services import sending_pause
from messaging.models import Direction, Message, Status
from tests.factories import DomainFactory, MessageFactory


def sends(domain, count: int, status: str = Status.DELIVERED, age: timedelta = timedelta(0)) -> None:
    messages = Message.objects.bulk_create(MessageFactory.build_batch(count, domain=domain, status=status))
    if age:
        Message.objects.filter(pk__in=[m.pk for m in messages]).update(created_at=timezone.now() - age)


@pytest.mark.parametrize(
    ("delivered", "bounced", "paused"),
    [
        (18, 1, False),  # 19 sends: below the minimum sample of 20, even at 5.3%
        (19, 1, False),  # 1 of 20 = 5%: at the limit
        (38, 2, False),  # 2 of 40 = 5%
        (37, 3, True),  # 3 of 40 = 7.5%
        (18, 2, True),  # 2 of 20 = 10%
    ],
)
def test_bounce_rate(domain, delivered, bounced, paused):
    sends(domain, delivered)
    sends(domain, bounced, Status.BOUNCED)
    assert safeguard_check(domain=domain) is paused
    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused) == (paused, paused)


@pytest.mark.parametrize(("delivered", "paused"), [(999, False), (998, True)])
def test_complaint_rate_over_a_tenth_of_a_percent(domain, settings, delivered, paused):
    settings.MAILSERVICE_SAFEGUARD_WINDOW_SENDS = 1000
    sends(domain, delivered)
    sends(domain, 1, Status.COMPLAINED)
    assert safeguard_check(domain=domain) is paused
    if paused:
        domain.refresh_from_db()
        assert domain.pause_reason == (
            "Automatic pause: complaint rate 0.1001% (1 of the last 999 sends) is over the 0.1% limit"
        )
        assert (domain.paused_by, domain.paused_at is not None) == ("safeguard", True)


def test_the_window_is_the_most_recent_sends(domain, settings):
    settings.MAILSERVICE_SAFEGUARD_WINDOW_SENDS = 20
    sends(domain, 10, Status.BOUNCED, age=timedelta(hours=1))  # older than the last 20 sends
    sends(domain, 20)
    assert sending_health(domain=domain).bounced == 0
    assert safeguard_check(domain=domain) is False


def test_the_window_ends_after_the_configured_hours(domain):
    sends(domain, 30, Status.BOUNCED, age=timedelta(hours=25))
    sends(domain, 20)
    assert (sending_health(domain=domain).sent, safeguard_check(domain=domain)) == (20, False)


def test_received_mail_and_other_domains_do_not_count(domain):
    sends(DomainFactory(), 30, Status.BOUNCED)
    MessageFactory.create_batch(30, domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED)
    sends(domain, 20)
    assert sending_health(domain=domain).sent == 20
    assert safeguard_check(domain=domain) is False


def test_an_already_paused_domain_keeps_its_reason(domain):
    sending_pause(domain=domain, actor="operator", reason="maintenance")
    sends(domain, 20, Status.BOUNCED)
    assert safeguard_check(domain=domain) is False
    domain.refresh_from_db()
    assert (domain.pause_reason, domain.auto_paused) == ("maintenance", False)

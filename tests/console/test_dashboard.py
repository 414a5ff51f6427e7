"""The admin index's dashboard: counts rolled up from message events, charts, the queue, rates against thresholds."""

from datetime import timedelta

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.models import F
from django.utils import timezone

from messaging.aggregates import ROLLUP_LAG, activity, status_counts_rollup
from messaging.models import (
    DailyStatusCount,
    EventType,
    HourlyStatusCount,
    MessageEvent,
    Status,
    StatusCountRollup,
)
from tests.factories import DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db


def _events(
    domain, kind: str, n: int, *, at=None, is_test: bool = False, event_model=MessageEvent, message_model=None
) -> None:
    for _ in range(n):
        if message_model is None:
            message = MessageFactory(domain=domain, status=Status.DELIVERED, is_test=is_test)
        else:  # the message table as a past migration left it
            message = message_model.objects.create(
                domain_id=domain.pk, direction="sent", status=Status.DELIVERED, is_test=is_test, to=[], cc=[], bcc=[]
            )
        event = event_model.objects.create(message_id=message.pk, type=kind)
        if at is not None:
            MessageEvent.objects.filter(pk=event.pk).update(created_at=at)


def _later():
    return timezone.now() + ROLLUP_LAG + timedelta(seconds=1)


def test_the_rollup_counts_each_event_once_by_hour_day_domain_and_kind(domain):
    other = DomainFactory(name="other.example.com")
    _events(domain, EventType.ACCEPTED, 3)
    _events(domain, EventType.DELIVERED, 2)
    _events(other, EventType.BOUNCED, 1)
    _events(domain, EventType.DEFERRED, 4)  # not a counted kind

    assert status_counts_rollup(now=_later()) == 6
    assert status_counts_rollup(now=_later()) == 0  # nothing new: nothing counted twice
    _events(domain, EventType.ACCEPTED, 1)
    assert status_counts_rollup(now=_later()) == 1

    daily = {(row.domain_id, row.kind): row.count for row in DailyStatusCount.objects.all()}
    assert daily == {(domain.pk, "accepted"): 4, (domain.pk, "delivered"): 2, (other.pk, "bounced"): 1}
    assert sum(HourlyStatusCount.objects.values_list("count", flat=True)) == 7


def test_the_newest_events_wait_for_the_next_pass(domain):
    _events(domain, EventType.ACCEPTED, 2)

    assert status_counts_rollup(now=timezone.now()) == 0  # younger than ROLLUP_LAG
    assert status_counts_rollup(now=_later()) == 2


def test_activity_spreads_counts_over_24_hours_and_14_days(domain):
    now = timezone.now()
    _events(domain, EventType.ACCEPTED, 2, at=now - timedelta(hours=3))
    _events(domain, EventType.ACCEPTED, 5, at=now - timedelta(days=3))
    _events(domain, EventType.BOUNCED, 1, at=now - timedelta(days=3))
    status_counts_rollup(now=_later())

    data = activity(now=now)

    assert data.overall_hourly.counts["sent"][-4] == 2 and data.overall_hourly.total("sent") == 2
    assert data.overall_daily.counts["sent"][-4] == 5 and data.overall_daily.total("sent") == 7
    assert data.domains[0].name == domain.name and data.domains[0].rate("bounced") == pytest.approx(1 / 7)


def test_the_dashboard_counts_no_sandbox_mail(operator, domain):
    # What a reviewer saw: 14 live sends, none bounced, and 3 test-key sends that bounced (3 of 17: 17.65 %).
    _events(domain, EventType.ACCEPTED, 14)
    _events(domain, EventType.ACCEPTED, 3, is_test=True)
    _events(domain, EventType.BOUNCED, 3, is_test=True)
    _events(domain, EventType.COMPLAINED, 1, is_test=True)
    status_counts_rollup(now=_later())

    html = operator.get("/admin/").content.decode()

    row = html[html.index(f'<tr data-domain="{domain.name}">') :]
    row = row[: row.index("</tr>")]
    assert "14 days: 14 sent" in row
    assert row.count('aria-label="0.00% of') == 2  # bounces and complaints
    assert "17.65%" not in html
    assert sum(DailyStatusCount.objects.values_list("count", flat=True)) == 14


@pytest.mark.django_db(transaction=True)
def test_the_migration_takes_sandbox_mail_out_of_counts_rolled_up_before(domain):
    before, after = (
        [("messaging", "0012_i28_idempotency_per_sandbox")],
        [("messaging", "0013_i28_status_counts_without_sandbox")],
    )
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)
        # The tables as they were then (later migrations add columns the current models write).
        old_apps = executor.loader.project_state(before).apps
        old_event, old_message = (old_apps.get_model("messaging", name) for name in ("MessageEvent", "Message"))
        _events(domain, EventType.ACCEPTED, 14, event_model=old_event, message_model=old_message)
        _events(domain, EventType.BOUNCED, 3, is_test=True, event_model=old_event, message_model=old_message)
        # Counted as the rollup counted them before it left sandbox mail out.
        for kind, at in MessageEvent.objects.values_list("type", "created_at"):
            for model, period in (
                (HourlyStatusCount, {"hour": at.replace(minute=0, second=0, microsecond=0)}),
                (DailyStatusCount, {"day": at.date()}),
            ):
                row, _ = model.objects.get_or_create(domain=domain, kind=kind, **period)
                model.objects.filter(pk=row.pk).update(count=F("count") + 1)
        StatusCountRollup.objects.update_or_create(pk=1, defaults={"last_event_id": old_event.objects.latest("id").id})

        executor.loader.build_graph()
        executor.migrate(after)

        daily = dict(DailyStatusCount.objects.values_list("kind", "count"))
        hourly = dict(HourlyStatusCount.objects.values_list("kind", "count"))
        assert daily == hourly == {"accepted": 14, "bounced": 0}
    finally:
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def test_the_index_shows_charts_queue_and_rates_in_a_fixed_number_of_queries(operator, django_assert_max_num_queries):
    for n in range(3):
        domain = DomainFactory(name=f"d{n}.example.com")
        _events(domain, EventType.ACCEPTED, 2)
        MessageFactory(domain=domain, status=Status.ACCEPTED)
    status_counts_rollup(now=_later())

    with django_assert_max_num_queries(30) as queries:
        html = operator.get("/admin/").content.decode()
    baseline = len(queries)
    for n in range(3, 13):
        _events(DomainFactory(name=f"d{n}.example.com"), EventType.ACCEPTED, 1)
    with django_assert_max_num_queries(baseline):
        operator.get("/admin/")

    assert html.count('<svg class="ms-chart"') == 2 + 2 * 3
    assert 'id="ms-queue-depth">Queued<strong>3</strong>' in html
    assert html.count('<svg class="ms-rate"') == 2 * 3
    assert "<script" not in html.split('id="ms-dashboard"')[1].split("</table>")[0]

"""Hourly and daily message counts per domain: what the console's dashboard reads instead of the message table.

A rollup adds the message events written since the last one to `HourlyStatusCount` and
`DailyStatusCount`: sent (the `accepted` event of a send), delivered, bounced, complained, failed
and received. Sandbox mail (test keys' messages, `Message.is_test`) is never counted: its outcomes
are simulated, and a test key's bounces must not show as a domain's bounce rate. It walks the event
table by primary key from the id it stopped at, so each pass reads only the new events, and leaves
the newest ROLLUP_LAG of events for the next pass: a transaction that inserted an event with a lower
id but commits later (writes here are single statements or short transactions) is counted as long as
it commits within that lag. Beat runs a pass every minute; without a broker (the embedded mode) the
dashboard runs one before it reads.
"""

from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, Max, Model
from django.db.models.functions import TruncHour
from django.utils import timezone

from domains.models import Domain
from messaging.models import CountedEvent, DailyStatusCount, HourlyStatusCount, MessageEvent, StatusCountRollup

ROLLUP_LAG = timedelta(seconds=60)
ROLLUP_MAX_EVENTS = 200_000  # per pass: a first pass over a large table catches up over a few minutes
HOURLY_RETENTION = timedelta(days=15)
DASHBOARD_HOURS = 24
DASHBOARD_DAYS = 14
_LABEL = {kind.value: kind.name.lower() for kind in CountedEvent}  # the event type -> what the dashboard calls it
KINDS = list(_LABEL.values())  # sent, delivered, bounced, complained, failed, received


def status_counts_rollup(*, now: datetime | None = None) -> int:
    """Count the events since the last pass into the hourly and daily tables; returns how many were counted."""
    now = now or timezone.now()
    StatusCountRollup.objects.get_or_create(pk=1)
    with transaction.atomic():
        state = StatusCountRollup.objects.select_for_update().get(pk=1)  # one pass at a time
        since = state.last_event_id
        new = MessageEvent.objects.filter(
            id__gt=since, id__lte=since + ROLLUP_MAX_EVENTS, created_at__lt=now - ROLLUP_LAG
        )
        upper = new.aggregate(upper=Max("id"))["upper"]
        if upper is None:
            return 0
        rows = (
            MessageEvent.objects.filter(
                id__gt=since, id__lte=upper, type__in=CountedEvent.values, message__is_test=False
            )
            .annotate(hour=TruncHour("created_at"))
            .values_list("hour", "message__domain_id", "type")
            .annotate(n=Count("id"))
            .order_by()
        )
        hourly: Counter[tuple[datetime | date, int, str]] = Counter()
        daily: Counter[tuple[datetime | date, int, str]] = Counter()
        for hour, domain_id, kind, n in rows:
            hourly[hour, domain_id, kind] += n
            daily[hour.date(), domain_id, kind] += n
        _add(HourlyStatusCount, "hour", hourly, now)
        _add(DailyStatusCount, "day", daily, now)
        state.last_event_id = upper
        state.save(update_fields=["last_event_id", "updated_at"])
        HourlyStatusCount.objects.filter(hour__lt=now - HOURLY_RETENTION).delete()
    return sum(hourly.values())


def _add(model: type[Model], period: str, counts: Counter[tuple[datetime | date, int, str]], now: datetime) -> None:
    """count += n for each (period, domain, kind), inserting missing rows: one statement per 500 rows."""
    table = connection.ops.quote_name(model._meta.db_table)
    items = list(counts.items())
    for start in range(0, len(items), 500):
        chunk = items[start : start + 500]
        values = ", ".join(["(%s, %s, %s, %s, %s, %s)"] * len(chunk))
        # Only the model's own identifiers are interpolated; every value is a parameter.
        sql = (
            f'INSERT INTO {table} ("{period}", "domain_id", "kind", "count", "created_at", "updated_at") '  # noqa: S608
            f'VALUES {values} ON CONFLICT ("{period}", "domain_id", "kind") '
            f'DO UPDATE SET "count" = {table}."count" + excluded."count", "updated_at" = excluded."updated_at"'
        )
        params = [value for (when, domain_id, kind), n in chunk for value in (when, domain_id, kind, n, now, now)]
        with connection.cursor() as cursor:
            cursor.execute(sql, params)


@dataclass
class Series:
    """Counts of each kind (sent, delivered, …) per bucket, oldest bucket first."""

    buckets: int
    counts: dict[str, list[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.counts = self.counts or {kind: [0] * self.buckets for kind in KINDS}

    def total(self, kind: str) -> int:
        return sum(self.counts[kind])


@dataclass
class DomainActivity:
    name: str
    hourly: Series
    daily: Series
    sending_paused: bool
    auto_paused: bool

    def rate(self, kind: str) -> float | None:
        """Share of the 14 days' sends that bounced or drew a complaint (None before the first send)."""
        sent = self.daily.total("sent")
        return self.daily.total(kind) / sent if sent else None


@dataclass
class Activity:
    hours: list[datetime]
    days: list[date]
    overall_hourly: Series
    overall_daily: Series
    domains: list[DomainActivity]  # busiest first
    bounce_rate_limit: float = field(default_factory=lambda: settings.MAILSERVICE_BOUNCE_RATE_LIMIT)
    complaint_rate_limit: float = field(default_factory=lambda: settings.MAILSERVICE_COMPLAINT_RATE_LIMIT)


def activity(*, now: datetime) -> Activity:
    """The last 24 hours by hour and 14 days by day, overall and per domain: three queries on the count tables."""
    this_hour = now.replace(minute=0, second=0, microsecond=0)
    hours = [this_hour - timedelta(hours=n) for n in reversed(range(DASHBOARD_HOURS))]
    days = [now.date() - timedelta(days=n) for n in reversed(range(DASHBOARD_DAYS))]
    hour_index = {hour: n for n, hour in enumerate(hours)}
    day_index = {day: n for n, day in enumerate(days)}
    overall_hourly, overall_daily = Series(DASHBOARD_HOURS), Series(DASHBOARD_DAYS)
    domains = {
        pk: DomainActivity(name, Series(DASHBOARD_HOURS), Series(DASHBOARD_DAYS), paused, auto)
        for pk, name, paused, auto in Domain.objects.values_list("pk", "name", "sending_paused", "auto_paused")
    }
    hourly_rows = HourlyStatusCount.objects.filter(hour__gte=hours[0]).values_list("hour", "domain_id", "kind", "count")
    for hour, domain_id, kind, n in hourly_rows:
        slot = hour_index.get(hour)
        if slot is None:  # a clock ahead of this one counted into a later hour
            continue
        overall_hourly.counts[_LABEL[kind]][slot] += n
        domains[domain_id].hourly.counts[_LABEL[kind]][slot] += n
    daily_rows = DailyStatusCount.objects.filter(day__gte=days[0]).values_list("day", "domain_id", "kind", "count")
    for day, domain_id, kind, n in daily_rows:
        slot = day_index.get(day)
        if slot is None:
            continue
        overall_daily.counts[_LABEL[kind]][slot] += n
        domains[domain_id].daily.counts[_LABEL[kind]][slot] += n
    busiest = sorted(domains.values(), key=lambda d: (-sum(map(d.daily.total, KINDS)), d.name))
    return Activity(hours, days, overall_hourly, overall_daily, busiest)

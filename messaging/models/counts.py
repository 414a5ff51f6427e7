"""Counts of messages and events per domain: what the retention purge deleted, and the hourly and
daily status counts the dashboard and the readiness check read (messaging/aggregates.py rolls them up)."""

from django.db import models

from domains.models import Domain
from messaging.models.messages import Direction, Status


class DailyMessageCount(models.Model):
    """Messages per domain, UTC day of creation, direction and status, of those the retention purge deleted.

    Written by the purge (messaging.retention) in the transaction that deletes the messages, so
    every message is counted either here or by its own row, never both: the console's figures
    add the two and survive the purge. Only final statuses reach it (a message is purged weeks
    after its last change).
    """

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="+")
    day = models.DateField()
    direction = models.CharField(max_length=8, choices=Direction.choices)
    status = models.CharField(max_length=10, choices=Status.choices)
    count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            # also serves the console's rates: a domain's counts since a day
            models.UniqueConstraint(
                fields=["domain", "day", "direction", "status"], name="daily_message_count_one_row"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.domain_id} {self.day} {self.direction} {self.status}: {self.count}"


class CountedEvent(models.TextChoices):
    """What the console's dashboard counts: the message events of these types (messaging/aggregates.py)."""

    SENT = "accepted", "sent"
    DELIVERED = "delivered"
    BOUNCED = "bounced"
    COMPLAINED = "complained"
    FAILED = "failed"
    RECEIVED = "received"


class StatusCount(models.Model):
    """Message events of one type for one domain in one period (messaging/aggregates.py keeps them)."""

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=20, choices=CountedEvent.choices)
    count = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        abstract = True


class HourlyStatusCount(StatusCount):
    """One UTC hour's counts; kept 15 days (the dashboard's 24 hours)."""

    hour = models.DateTimeField()

    class Meta:
        constraints = [
            # The rollup's upsert (ON CONFLICT) and the dashboard's range read by hour.
            models.UniqueConstraint(fields=["hour", "domain", "kind"], name="hourly_status_count_unique")
        ]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.domain_id} {self.kind}: {self.count}"


class DailyStatusCount(StatusCount):
    """One UTC day's counts (the dashboard's 14 days and rates)."""

    day = models.DateField()

    class Meta:
        constraints = [
            # The rollup's upsert (ON CONFLICT) and the dashboard's range read by day.
            models.UniqueConstraint(fields=["day", "domain", "kind"], name="daily_status_count_unique")
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.domain_id} {self.kind}: {self.count}"


class StatusCountRollup(models.Model):
    """The one row (pk=1) recording how far the event counts have been rolled up: the last event id counted."""

    last_event_id = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"rolled up to event {self.last_event_id}"

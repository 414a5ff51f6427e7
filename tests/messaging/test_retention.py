"""Retention: messages past MAILSERVICE_RETENTION_DAYS (or their domain's own setting) are purged with
their events and raw sources; daily counts keep the console's figures; cursors never break.

Two paths: the row purge (SQLite, PostgreSQL's DEFAULT partition, which backdated rows land in, and
domains with a shorter retention), and on PostgreSQL the drop of whole day partitions."""

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from mailservice.partitions import day_partition_name, day_partitions, partitions_ensure
from messaging.models import DailyMessageCount, Direction, EventType, Message, MessageEvent, Status, Suppression
from messaging.partitioning import history_tables
from messaging.retention import held_partitions, messages_purge
from messaging.selectors import delivery_rates
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory
from tests.harness import FAST_DISPATCH, celery_worker, wait_until
from webhooks.models import WebhookDelivery, WebhookEndpoint

pytestmark = pytest.mark.django_db


def aged(days: float, **fields) -> Message:
    """A message created `days` days ago, with its accepted event."""
    message = MessageFactory(**fields)
    created = timezone.now() - timedelta(days=days)
    Message.objects.filter(pk=message.pk).update(created_at=created)
    MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)
    message.refresh_from_db()
    return message


@pytest.fixture
def domain():
    return DomainFactory(name="keep.example.com")


def test_messages_past_retention_go_with_their_events_and_raw_source(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    old = [aged(31, domain=domain, status=Status.DELIVERED) for _ in range(3)]
    received = aged(40, domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED, raw=b"From: x\r\n\r\nhi")
    recent = aged(29, domain=domain, status=Status.DELIVERED)

    result = messages_purge(batch_size=2)

    assert result.purged == {domain.name: 4}
    assert list(Message.objects.all()) == [recent]
    assert not MessageEvent.objects.filter(message_id__in=[m.pk for m in [*old, received]]).exists()
    assert MessageEvent.objects.filter(message=recent).exists()


def test_a_domains_own_retention_overrides_the_default(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    short = DomainFactory(name="short.example.com", retention_days=2)
    long = DomainFactory(name="long.example.com", retention_days=90)
    kept = [aged(3, domain=domain, status=Status.DELIVERED), aged(60, domain=long, status=Status.DELIVERED)]
    aged(3, domain=short, status=Status.DELIVERED)
    aged(91, domain=long, status=Status.DELIVERED)

    assert messages_purge().purged == {short.name: 1, long.name: 1}
    assert set(Message.objects.all()) == set(kept)


def test_a_message_still_waiting_for_dispatch_is_not_purged(domain):
    waiting = aged(45, domain=domain, status=Status.ACCEPTED)
    assert messages_purge().total == 0
    assert Message.objects.get() == waiting


def test_suppressions_outlive_the_message_that_caused_them(domain):
    bounced = aged(31, domain=domain, status=Status.BOUNCED)
    Suppression.objects.create(domain=domain, address="gone@example.org", reason="bounce", source_message=bounced)

    messages_purge()

    suppression = Suppression.objects.get()
    assert (suppression.address, suppression.source_message) == ("gone@example.org", None)


def test_daily_counts_keep_the_consoles_figures_through_the_purge(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 10
    for status in [Status.DELIVERED] * 6 + [Status.BOUNCED, Status.BOUNCED, Status.COMPLAINED]:
        aged(12, domain=domain, status=status)
    aged(1, domain=domain, status=Status.DELIVERED)
    before = delivery_rates(domain_ids=[domain.pk], days=30)[domain.pk]

    messages_purge(batch_size=4)

    assert Message.objects.count() == 1
    after = delivery_rates(domain_ids=[domain.pk], days=30)[domain.pk]
    assert (
        (after.sent, after.bounced, after.complained)
        == (before.sent, before.bounced, before.complained)
        == (
            10,
            2,
            1,
        )
    )
    day = (timezone.now() - timedelta(days=12)).date()
    counts = dict(DailyMessageCount.objects.filter(domain=domain, day=day).values_list("status", "count"))
    assert counts == {"delivered": 6, "bounced": 2, "complained": 1}


def test_purged_sandbox_mail_never_counts_towards_the_domains_rates(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 10
    aged(12, domain=domain, status=Status.DELIVERED)
    for _ in range(3):
        aged(12, domain=domain, status=Status.BOUNCED, is_test=True)

    assert messages_purge().total == 4

    rates = delivery_rates(domain_ids=[domain.pk], days=30)[domain.pk]
    assert (rates.sent, rates.bounced) == (1, 0)


def test_a_second_purge_adds_to_the_days_counts(domain):
    aged(31, domain=domain, status=Status.DELIVERED)
    messages_purge()
    MessageFactory(domain=domain, status=Status.DELIVERED)
    Message.objects.update(created_at=timezone.now() - timedelta(days=31))
    messages_purge()
    assert DailyMessageCount.objects.get().count == 2


def test_a_dry_run_counts_and_deletes_nothing(domain, capsys):
    aged(31, domain=domain, status=Status.DELIVERED)
    aged(31, domain=domain, status=Status.FAILED)

    call_command("purge_messages", "--dry-run")

    assert f"{domain.name}: 2 message(s) would be purged" in capsys.readouterr().out
    assert Message.objects.count() == 2 and not DailyMessageCount.objects.exists()
    call_command("purge_messages")
    assert "2 message(s) purged" in capsys.readouterr().out
    assert not Message.objects.exists()


@pytest.mark.parametrize("purged_rows", ["the cursor's own message", "the whole next page", "everything older"])
def test_a_cursor_into_a_purged_page_gives_the_next_existing_page(domain, purged_rows):
    key = ApiKeyFactory(domain=domain)
    messages = [aged(40 - n, domain=domain, status=Status.DELIVERED, subject=f"m{n}") for n in range(8)]
    api = client_for(key)
    first = api.get("/v1/messages?limit=2").json()
    assert [m["subject"] for m in first["data"]] == ["m7", "m6"]
    gone = {
        "the cursor's own message": [messages[6]],
        "the whole next page": messages[4:6],
        "everything older": messages[:7],
    }[purged_rows]
    Message.objects.filter(pk__in=[m.pk for m in gone]).delete()

    response = api.get(f"/v1/messages?limit=2&after={first['next_cursor']}")

    assert response.status_code == 200
    expected = [m.subject for m in reversed(messages[:6]) if m not in gone][:2]
    assert [m["subject"] for m in response.json()["data"]] == expected


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_the_beat_task_purges_expired_messages_on_its_next_run():
    domain = DomainFactory(name="beat.example.com")
    expired = [aged(31, domain=domain, status=Status.DELIVERED) for _ in range(3)]
    kept = aged(1, domain=domain, status=Status.DELIVERED)
    env = FAST_DISPATCH | {
        "MAILSERVICE_RETENTION_DAYS": "30",
        "MAILSERVICE_RETENTION_PURGE_INTERVAL": "0.5",
        "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}",
    }
    with celery_worker(**env) as worker:
        wait_until(
            lambda: not Message.objects.filter(pk__in=[m.pk for m in expired]).exists(),
            timeout=60,
            interval=0.2,
            message=f"the purge (worker log: {worker.log_path})",
        )

    assert list(Message.objects.all()) == [kept]
    assert not MessageEvent.objects.exclude(message=kept).exists()
    assert DailyMessageCount.objects.get(domain=domain).count == 3


# --- PostgreSQL: whole days dropped --------------------------------------------------------------

partitioned = pytest.mark.skipif(connection.vendor != "postgresql", reason="history is partitioned on PostgreSQL")


def noon(days_ago: int) -> datetime:
    """Midday (UTC) `days_ago` days ago: the middle of that day's partition, whatever the time of the run."""
    day = datetime.now(UTC).date() - timedelta(days=days_ago)
    return datetime(day.year, day.month, day.day, 12, tzinfo=UTC)


def with_day_partitions(*days_ago: int) -> None:
    """The day partitions of those days, for messages, events and webhook deliveries (the test database
    has them from its creation on)."""
    for table in history_tables():
        partitions_ensure(table, days=[noon(days).date() for days in days_ago])


def on_day(days_ago: int, **fields) -> Message:
    """A message created at noon `days_ago` days ago, with its accepted event of the same moment."""
    message = MessageFactory(**fields)
    Message.objects.filter(pk=message.pk).update(created_at=noon(days_ago))
    event = MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)
    MessageEvent.objects.filter(pk=event.pk).update(created_at=noon(days_ago))
    message.refresh_from_db()
    return message


def partition_names(table: str) -> set[str]:
    return {partition.name for partition in day_partitions(table)}


@partitioned
def test_a_day_past_retention_is_dropped_whole_after_its_counts_are_kept(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    with_day_partitions(31, 29)
    old = [on_day(31, domain=domain, status=status) for status in (Status.DELIVERED, Status.DELIVERED, Status.BOUNCED)]
    on_day(31, domain=domain, status=Status.DELIVERED, is_test=True)
    recent = on_day(29, domain=domain, status=Status.DELIVERED)
    Suppression.objects.create(domain=domain, address="gone@example.org", reason="bounce", source_message=old[2])
    endpoint = WebhookEndpoint.objects.create(domain=domain, url="https://hooks.example.com/")
    event = MessageEvent.objects.filter(message=old[0]).get()
    for about in (event, MessageEvent.objects.filter(message=recent).get()):
        WebhookDelivery.objects.create(
            endpoint=endpoint,
            message_event=about,
            subject_created_at=about.created_at,
            event_id=f"evt_{about.pk}",
            event_type="x",
            payload="",
        )

    with CaptureQueriesContext(connection) as queries:
        result = messages_purge()

    messages_day, events_day, deliveries_day = (
        day_partition_name(table, noon(31).date()) for table in history_tables()
    )
    assert {messages_day, events_day} <= set(result.dropped)
    assert messages_day not in partition_names("messaging_message")
    assert events_day not in partition_names("messaging_messageevent")
    # The events' day of deliveries is dropped with them, not deleted row by row.
    assert deliveries_day not in partition_names("webhooks_webhookdelivery")
    assert f'DROP TABLE "{deliveries_day}"' in {query["sql"] for query in queries}
    assert result.purged == {domain.name: 4}
    assert list(Message.objects.all()) == [recent]
    assert list(MessageEvent.objects.values_list("message_id", flat=True)) == [recent.pk]
    counts = dict(DailyMessageCount.objects.filter(domain=domain, day=noon(31).date()).values_list("status", "count"))
    assert counts == {"delivered": 2, "bounced": 1}  # sandbox mail is not counted
    assert Suppression.objects.get().source_message_id is None
    assert list(WebhookDelivery.objects.values_list("message_event__message", flat=True)) == [recent.pk]


@partitioned
def test_a_day_holding_a_message_still_accepted_is_kept_and_its_other_messages_go_by_row(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    with_day_partitions(32)
    waiting = on_day(32, domain=domain, status=Status.ACCEPTED)
    on_day(32, domain=domain, status=Status.DELIVERED)
    messages_day = day_partition_name("messaging_message", noon(32).date())

    result = messages_purge()

    assert result.held == [messages_day] and messages_day not in result.dropped
    assert held_partitions() == [messages_day]
    assert result.purged == {domain.name: 1}
    assert list(Message.objects.all()) == [waiting]
    # The events of that day stay while a message of it does.
    assert MessageEvent.objects.filter(message=waiting).exists()

    Message.objects.filter(pk=waiting.pk).update(status=Status.DELIVERED)
    result = messages_purge()

    assert messages_day in result.dropped and not Message.objects.exists() and held_partitions() == []


@partitioned
def test_a_shorter_retention_purges_rows_of_a_live_day_and_the_longest_waits_for_its_day(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    short = DomainFactory(name="short.example.com", retention_days=2)
    with_day_partitions(30, 3)
    # 30 days ago at noon is past the 30-day retention within the hour, but its day's partition ends
    # tomorrow at midnight: it goes with it, not row by row.
    waits = on_day(30, domain=domain, status=Status.DELIVERED)
    on_day(3, domain=short, status=Status.DELIVERED)
    on_day(30, domain=short, status=Status.DELIVERED)

    result = messages_purge(now=noon(0) + timedelta(hours=1))

    assert result.purged == {short.name: 2}
    assert list(Message.objects.all()) == [waits]


@partitioned
def test_a_dry_run_names_the_days_it_would_drop_and_drops_nothing(domain, settings):
    settings.MAILSERVICE_RETENTION_DAYS = 30
    with_day_partitions(35)
    on_day(35, domain=domain, status=Status.DELIVERED)

    result = messages_purge(dry_run=True)

    assert day_partition_name("messaging_message", noon(35).date()) in result.dropped
    assert day_partition_name("messaging_message", noon(35).date()) in partition_names("messaging_message")
    assert Message.objects.count() == 1


@partitioned
def test_the_purge_makes_the_coming_days_partitions(domain):
    today = datetime.now(UTC).date()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {day_partition_name('messaging_message', today + timedelta(days=3))}")

    messages_purge()

    assert day_partition_name("messaging_message", today + timedelta(days=3)) in partition_names("messaging_message")
    assert day_partition_name("messaging_message", today + timedelta(days=7)) in partition_names("messaging_message")

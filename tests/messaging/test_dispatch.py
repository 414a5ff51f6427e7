"""Dispatch in-process: claims, retry scheduling, suppressions, pauses, the sweeper, the file outbox."""

import threading
import time
from datetime import timedelta

import dkim
import pytest
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from domains.services import sending_pause, sending_resume
from messaging.models import EventType, Message, Status, Suppression, SuppressionReason
from messaging.outbound import leases
from messaging.outbound.dispatch import dispatch_batch, dispatch_claim, dispatch_sweep, send_batch
from messaging.outbound.leases import LEASE_CHECK_SECONDS, BatchLease
from messaging.outbound.outcomes import retry_delay
from messaging.suppressions import suppression_add
from tests.factories import MessageFactory, dkim_dnsfunc
from tests.harness import free_port

# Every outcome is written on both paths: the one statement (PostgreSQL) and its ORM twin.
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("sql_path")]


@pytest.fixture
def outbox(settings, tmp_path):
    settings.EMAIL_URL = None
    settings.MAILSERVICE_OUTBOX_DIR = tmp_path
    return tmp_path


@pytest.fixture
def unreachable_relay(settings):
    """A relay nobody listens on: a message that needed SMTP would be deferred, not anything else."""
    settings.EMAIL_URL = f"smtp://127.0.0.1:{free_port()}"


def due_message(**fields) -> Message:
    return MessageFactory(next_attempt_at=timezone.now() - timedelta(seconds=1), **fields)


def event_types(message: Message) -> list[str]:
    return list(message.events.values_list("type", flat=True))


def test_of_two_claims_of_one_message_only_the_first_wins():
    message = due_message()

    first = dispatch_claim(public_id=message.public_id, limit=1)
    second = dispatch_claim(public_id=message.public_id, limit=1)

    assert [claimed.pk for claimed in first] == [message.pk]
    assert second == []
    message.refresh_from_db()
    assert message.attempts == 1 and message.lease_expires_at > timezone.now()


def test_a_claim_whose_lease_ran_out_can_be_taken_over(settings):
    settings.MAILSERVICE_DISPATCH_LEASE_SECONDS = -1
    message = due_message()

    assert dispatch_claim(limit=1) and [m.pk for m in dispatch_claim(limit=1)] == [message.pk]
    message.refresh_from_db()
    assert message.attempts == 2


def test_a_claim_takes_a_batch_with_the_requested_message_first(settings):
    settings.MAILSERVICE_DISPATCH_BATCH_SIZE = 3
    older = [due_message() for _ in range(3)]
    requested = due_message()
    MessageFactory(next_attempt_at=timezone.now() + timedelta(minutes=5))  # a retry not yet due

    claimed = dispatch_claim(public_id=requested.public_id, limit=3)

    assert [m.pk for m in claimed][0] == requested.pk
    assert {m.pk for m in claimed[1:]} <= {m.pk for m in older} and len(claimed) == 3


@pytest.mark.parametrize("scope", ["domain", "global"])
def test_a_pause_holds_queued_messages_and_the_sweeper_sends_them_after_resume(scope, outbox):
    message = MessageFactory(next_attempt_at=timezone.now() - timedelta(minutes=5))
    target = message.domain if scope == "domain" else None
    sending_pause(domain=target, actor="ops", reason="test")

    assert dispatch_batch(public_id=message.public_id) == 0
    assert dispatch_sweep(enqueue=lambda: pytest.fail("nothing is due while paused")) == 0
    message.refresh_from_db()
    assert (message.status, message.attempts, list(outbox.iterdir())) == (Status.ACCEPTED, 0, [])

    sending_resume(domain=target)
    call_command("dispatch_pending")
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert (outbox / f"{message.public_id}.eml").exists()


def test_the_default_retry_schedule_spans_more_than_an_hour_over_at_least_five_attempts(settings):
    attempts = settings.MAILSERVICE_DISPATCH_MAX_ATTEMPTS
    settings.MAILSERVICE_DISPATCH_BACKOFF_JITTER = 0
    waits = [retry_delay(attempt=n) for n in range(1, attempts)]

    assert attempts >= 5
    assert sum(waits, timedelta()) >= timedelta(hours=1)
    assert waits == sorted(waits) and waits[1] == 2 * waits[0]


def test_retry_delays_grow_exponentially_with_bounded_jitter_and_a_cap(settings):
    settings.MAILSERVICE_DISPATCH_BACKOFF_BASE = 10
    settings.MAILSERVICE_DISPATCH_BACKOFF_MAX = 50
    settings.MAILSERVICE_DISPATCH_BACKOFF_JITTER = 0.5
    for attempt, base in [(1, 10), (2, 20), (3, 40), (4, 50), (9, 50)]:
        delays = {retry_delay(attempt=attempt).total_seconds() for _ in range(50)}
        assert all(base <= delay <= base * 1.5 for delay in delays)
        assert len(delays) > 1


def test_a_temporary_failure_schedules_a_retry_and_the_last_one_fails_the_message(settings, unreachable_relay):
    settings.MAILSERVICE_DISPATCH_MAX_ATTEMPTS = 2
    settings.MAILSERVICE_DISPATCH_BACKOFF_BASE = 600
    message = due_message()

    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    assert (message.status, message.attempts, message.lease_expires_at) == (Status.ACCEPTED, 1, None)
    assert message.next_attempt_at > timezone.now() + timedelta(seconds=590)
    assert "ConnectionRefusedError" in message.last_error

    Message.objects.filter(pk=message.pk).update(next_attempt_at=timezone.now())
    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    assert (message.status, message.attempts, message.next_attempt_at) == (Status.FAILED, 2, None)
    assert event_types(message) == [EventType.DEFERRED, EventType.FAILED]


def test_a_message_whose_recipients_are_all_suppressed_fails_without_contacting_the_relay(unreachable_relay):
    message = due_message(to=["Bob <Bob@Example.org>"], bcc=["carol@example.org"])
    for address in ["bob@example.org", "carol@example.org"]:
        Suppression.objects.create(domain=message.domain, address=address, reason=SuppressionReason.BOUNCE)

    dispatch_batch(public_id=message.public_id)

    message.refresh_from_db()
    assert (message.status, message.last_error) == (Status.FAILED, "every recipient is on the suppression list")
    assert event_types(message) == [EventType.SUPPRESSED, EventType.SUPPRESSED, EventType.FAILED]


def test_suppressed_recipients_are_skipped_and_the_rest_delivered(outbox):
    message = due_message(to=["bob@example.org", "carol@example.org", "Zoë <Zoe@Bücher.example>"])
    Suppression.objects.create(domain=message.domain, address="bob@example.org", reason=SuppressionReason.MANUAL)
    # Listed under its canonical key (lower case, A-label domain), as suppression_add writes it.
    suppression_add(domain=message.domain, address="zoe@bücher.example", reason=SuppressionReason.BOUNCE)
    Suppression.objects.create(
        address="carol@example.org", reason=SuppressionReason.MANUAL, domain=MessageFactory().domain
    )

    dispatch_batch(public_id=message.public_id)

    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert list(message.events.values_list("type", "recipient")) == [
        (EventType.SUPPRESSED, "bob@example.org"),
        (EventType.SUPPRESSED, "zoe@xn--bcher-kva.example"),
        (EventType.DELIVERED, ""),
    ]


def claimed_batch(size: int, *, checked_ago: float = 0.0) -> tuple[list[Message], BatchLease]:
    """A batch claimed the way dispatch_batch claims one, whose lease was last confirmed `checked_ago` seconds ago."""
    messages = dispatch_claim(limit=size)
    return messages, BatchLease(expires_at=messages[0].lease_expires_at, checked_at=time.monotonic() - checked_ago)


def test_a_worker_that_stalled_past_its_lease_neither_sends_nor_records(settings, outbox):
    settings.MAILSERVICE_DISPATCH_LEASE_SECONDS = 0.2
    message = due_message()
    stalled, lease = claimed_batch(1)
    time.sleep(0.25)  # the stall: the lease runs out and another worker claims the message
    [taken_over] = dispatch_claim(limit=1)

    assert send_batch(stalled, lease) == 0
    assert list(outbox.iterdir()) == []
    message.refresh_from_db()
    assert (message.attempts, message.lease_expires_at) == (2, taken_over.lease_expires_at)
    assert event_types(message) == []


def test_a_pause_stops_a_batch_between_two_messages_and_gives_back_their_attempts(outbox):
    for _ in range(3):
        due_message()
    messages, lease = claimed_batch(3, checked_ago=LEASE_CHECK_SECONDS)
    sending_pause(domain=None, actor="ops", reason="test")

    assert send_batch(messages, lease) == 0
    assert list(outbox.iterdir()) == []
    assert set(Message.objects.values_list("status", "attempts", "lease_expires_at")) == {(Status.ACCEPTED, 0, None)}


# Each outcome's write: one statement on PostgreSQL; the twin's transaction (here a savepoint,
# the UPDATE, the event INSERT and the release) elsewhere.
WRITE_QUERIES = {"one statement": 1, "ORM twin": 4}


@pytest.fixture
def roomy_check_interval(monkeypatch) -> float:
    """A lease check interval no busy machine outlasts while sending three messages: the query counts below
    are about what happens within one interval (on 2 cores shared with others, one batch took over 1 s)."""
    monkeypatch.setattr(leases, "LEASE_CHECK_SECONDS", 30.0)
    return 30.0


def test_within_the_check_interval_a_batch_costs_one_write_per_message(
    outbox, sql_path, django_assert_num_queries, roomy_check_interval
):
    for _ in range(3):
        due_message()
    messages, lease = claimed_batch(3)

    # The batch's suppression lookup and signing keys, then each message's outcome.
    with django_assert_num_queries(2 + 3 * WRITE_QUERIES[sql_path]):
        assert send_batch(messages, lease) == 3
    assert len(list(outbox.iterdir())) == 3


def test_a_stale_lease_is_renewed_once_for_the_rest_of_the_batch(
    outbox, sql_path, django_assert_num_queries, roomy_check_interval
):
    for _ in range(3):
        due_message()
    messages, lease = claimed_batch(3, checked_ago=roomy_check_interval)
    claimed_until = lease.expires_at

    # As above, plus the renewal's UPDATE and the read of what it renewed.
    with django_assert_num_queries(4 + 3 * WRITE_QUERIES[sql_path]):
        assert send_batch(messages, lease) == 3
    assert lease.expires_at > claimed_until
    assert {m.status for m in Message.objects.all()} == {Status.DELIVERED}


def test_the_sweeper_enqueues_lost_first_attempts_and_due_retries_but_not_fresh_or_leased_ones(settings):
    settings.MAILSERVICE_DISPATCH_SWEEP_GRACE = 60
    settings.MAILSERVICE_DISPATCH_BATCH_SIZE = 2
    now = timezone.now()
    MessageFactory(next_attempt_at=now - timedelta(minutes=5))  # its task was lost
    MessageFactory(next_attempt_at=now - timedelta(seconds=1), attempts=1)  # a retry that is due
    MessageFactory(next_attempt_at=now - timedelta(minutes=5), attempts=1)  # another one
    MessageFactory(next_attempt_at=now - timedelta(seconds=1))  # just sent: its own task will come
    MessageFactory(next_attempt_at=now - timedelta(minutes=5), lease_expires_at=now + timedelta(minutes=1))
    MessageFactory(next_attempt_at=now - timedelta(minutes=5), status=Status.DELIVERED)
    enqueued = []

    assert dispatch_sweep(enqueue=lambda: enqueued.append(1)) == 3
    assert len(enqueued) == 2  # one task per batch of two


def test_dispatch_pending_delivers_due_messages_in_process_without_a_broker(outbox, capsys):
    message = MessageFactory(next_attempt_at=timezone.now() - timedelta(hours=1))

    call_command("dispatch_pending")

    assert "1 message(s) due" in capsys.readouterr().out
    message.refresh_from_db()
    assert message.status == Status.DELIVERED
    assert (outbox / f"{message.public_id}.eml").exists()


def test_a_send_through_the_api_is_written_to_the_outbox_signed_once_committed(
    api, domain, outbox, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(
            "/v1/send",
            {"from": "hello@acme.example.com", "to": "bob@example.org", "subject": "Hi", "text": "Hello"},
            format="json",
        )

    message = Message.objects.get(public_id=response.json()["id"])
    assert message.status == Status.DELIVERED
    assert message.message_id_header == f"<{message.public_id}@acme.example.com>"
    data = (outbox / f"{message.public_id}.eml").read_bytes()
    assert dkim.verify(data, dnsfunc=dkim_dnsfunc(domain))


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_split_the_due_messages_without_overlap():
    messages = [due_message() for _ in range(40)]
    barrier = threading.Barrier(4)
    claims: list[set[int]] = []

    def claimer() -> None:
        barrier.wait()
        try:
            claims.append({m.pk for m in dispatch_claim(limit=15)})
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sum(len(claim) for claim in claims) == len(set().union(*claims)) == len(messages)
    assert set(Message.objects.values_list("attempts", flat=True)) == {1}

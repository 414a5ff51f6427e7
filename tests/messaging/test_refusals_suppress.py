"""A receiver's refusal is a bounce, whoever says it (issue 40, item 1): a real Postfix refuses at RCPT,
as the recipients' MX (direct delivery) and as the relay, and the bounce policy (messaging/bounces.py)
decides as it does for a bounce report. A hard mailbox refusal suppresses the recipient by the same
attempt, and the next send to it is skipped without a connection; a refusal that blocks the sender
suppresses no one. Postfix's log counts the connections it accepted."""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta

import pytest
from django.utils import timezone

from domains.models import Domain
from messaging.models import EventType, Message, Status, Suppression, SuppressionReason
from messaging.outbound.dispatch import dispatch_batch
from tests.factories import DomainFactory, MessageFactory
from tests.harness import free_port, running, smtp_sink, wait_until
from tests.harness.postfix import PostfixServer
from tests.messaging.test_mx_delivery import mx
from webhooks.payloads import event_fields

pytestmark = [pytest.mark.live, pytest.mark.django_db]

SENDER_BLOCKED = "550 5.7.1 Sender blocked: this address requires confirmation, see whitelist"


def sent(domain: Domain, *recipients: str) -> Message:
    """Dispatch a message of `domain` to `recipients` in-process and return it as recorded."""
    message = MessageFactory(domain=domain, to=list(recipients), next_attempt_at=timezone.now() - timedelta(seconds=1))
    dispatch_batch(public_id=message.public_id)
    message.refresh_from_db()
    return message


def logged_connections(server: PostfixServer) -> int:
    """The connections Postfix has logged, counted once a probe of ours shows in its log: each earlier
    connection was logged before it (the readiness probe's too), so the count is complete, the probe included."""
    before = server.connections()
    server.greets()
    wait_until(lambda: server.connections() > before, timeout=10, message="Postfix to log the probe's connection")
    return server.connections()


def connections_made(server: PostfixServer, send: Callable[[], Message]) -> tuple[Message, int]:
    """`send()`'s message, and the connections Postfix accepted meanwhile."""
    before = logged_connections(server)
    message = send()
    return message, logged_connections(server) - before - 1


@contextmanager
def postfix(**options) -> Iterator[PostfixServer]:
    with smtp_sink() as sink, running(PostfixServer(next_hop=f"127.0.0.1:{sink.port}", **options)) as server:
        yield server


def suppressed(domain: Domain) -> dict[str, tuple[str, str]]:
    return {s.address: (s.reason, s.detail) for s in Suppression.objects.filter(domain=domain)}


def assert_refusal_policy(domain: Domain, send: Callable[..., Message], server: PostfixServer, unknown: str) -> None:
    """The unknown user is suppressed by the attempt its refusal came back to; the sender-blocking
    refusal is recorded and suppresses no one; the next send to the unknown user makes no connection."""
    [(reason, detail)] = suppressed(domain).values()
    assert list(suppressed(domain)) == [unknown]
    assert reason == SuppressionReason.BOUNCE
    assert detail.startswith("550 5.1.1 ") and "User unknown" in detail

    again, connections = connections_made(server, lambda: send(domain, unknown))
    assert again.status == Status.FAILED
    assert again.events.filter(type=EventType.SUPPRESSED, recipient=unknown).exists()
    assert connections == 0


def test_a_postfix_mx_refusing_an_unknown_user_suppresses_it_and_the_next_send_connects_no_more(zone, mx_port):
    mx(zone, "example.test", (10, "mx.example.test", "127.0.0.2"))
    domain = DomainFactory()
    with postfix(
        host="127.0.0.2",
        port=mx_port,
        domains=("example.test",),
        mailboxes=("bob@example.test", "carol@example.test"),
        recipient_access={"carol@example.test": SENDER_BLOCKED},
    ) as server:
        recipients = ("nobody@example.test", "carol@example.test", "bob@example.test")
        message, connections = connections_made(server, lambda: sent(domain, *recipients))
        assert connections == 1

        assert message.status == Status.DELIVERED, message.last_error
        refused = message.events.get(type=EventType.RECIPIENT_REJECTED, recipient="nobody@example.test")
        assert refused.smtp_code == 550 and refused.enhanced_status == "5.1.1"
        webhook = event_fields(refused)
        assert (webhook["bounce_type"], webhook["reason"], webhook["cause"]) == ("hard", "user_unknown", "mailbox")
        assert "User unknown in relay recipient table" in webhook["smtp_response"]
        blocked = message.events.get(type=EventType.RECIPIENT_REJECTED, recipient="carol@example.test")
        assert (blocked.bounce_type, blocked.reason, blocked.cause) == ("hard", "blocked", "reputation")
        assert_refusal_policy(domain, sent, server, "nobody@example.test")


def test_a_postfix_relay_refusing_an_unknown_user_suppresses_it_and_the_next_send_connects_no_more(settings):
    domain = DomainFactory()
    with postfix(
        host="127.0.0.3",
        port=free_port(),
        relay=True,
        recipient_access={"nobody@example.org": "550 5.1.1 User unknown", "carol@example.org": SENDER_BLOCKED},
    ) as server:
        settings.EMAIL_URL = f"smtp://{server.host}:{server.port}?starttls=off"
        message, connections = connections_made(server, lambda: sent(domain, "nobody@example.org", "carol@example.org"))
        assert connections == 1

        assert message.status == Status.BOUNCED, message.last_error
        # Every recipient refused at RCPT: one bounce each, and no message-level one repeating them.
        events = message.events.all()
        assert {(e.type, e.recipient, e.enhanced_status, e.reason) for e in events} == {
            (EventType.BOUNCED, "nobody@example.org", "5.1.1", "user_unknown"),
            (EventType.BOUNCED, "carol@example.org", "5.7.1", "blocked"),
        }
        assert_refusal_policy(domain, sent, server, "nobody@example.org")

"""Dispatch end to end with real processes: gunicorn, a Celery worker (with beat) on Redis, an aiosmtpd sink."""

import email
import email.policy
import re
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import dkim
import httpx
import pytest

from domains.models import Domain
from domains.services import FIRST_DKIM_SELECTOR, dkim_activate, dkim_rotate
from messaging.models import EventType, Message, MessageEvent, SuppressionReason
from messaging.suppressions import suppression_add
from messaging.verp import verp_local_part
from tests.factories import ApiKeyFactory, DomainFactory, dkim_dnsfunc
from tests.harness import (
    FAST_DISPATCH,
    CeleryWorker,
    celery_worker,
    free_port,
    redis_server,
    smtp_sink,
    wait_until,
    web_server,
)

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@dataclass
class Stack:
    base_url: str
    headers: dict[str, str]
    domain: Domain
    worker: CeleryWorker

    def send(self, **body) -> httpx.Response:
        payload = {"from": f"Acme Shop <shop@{self.domain.name}>", "to": "bob@example.org", "subject": "Hi"}
        return httpx.post(f"{self.base_url}/v1/send", headers=self.headers, json=payload | body, timeout=30)

    def status(self, message_id: str) -> str:
        return httpx.get(f"{self.base_url}/v1/messages/{message_id}", headers=self.headers).json()["status"]

    def wait_for_status(self, message_id: str, status: str, timeout: float = 30) -> None:
        wait_until(
            lambda: self.status(message_id) == status,
            timeout=timeout,
            interval=0.2,
            message=f"{message_id} to be {status} (worker log: {self.worker.log_path})",
        )


@contextmanager
def running(*, email_url: str, start_worker: bool = True, **env: str) -> Iterator[Stack]:
    """The web server and a worker (started unless told otherwise) on a fresh queue, relaying to `email_url`."""
    domain = DomainFactory(name="shop.example.com")
    key = ApiKeyFactory(domain=domain)
    settings = FAST_DISPATCH | {"EMAIL_URL": email_url, "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}"} | env
    with web_server(workers=1, **settings) as base_url, celery_worker(start=start_worker, **settings) as worker:
        yield Stack(base_url, {"Authorization": f"Bearer {key.secret}"}, domain, worker)


def verifies(data: bytes, domain: Domain) -> bool:
    return dkim.verify(data, dnsfunc=dkim_dnsfunc(domain))


def test_a_sent_message_reaches_the_relay_signed_with_bcc_only_in_the_envelope():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        response = stack.send(
            to=["Bob Example <bob@example.org>"],
            cc="carol@example.org",
            bcc="secret@example.net",
            replyTo="help@shop.example.com",
            subject="Your order ✓",
            text="Thanks for your order.",
            html="<p>Thanks for your <b>order</b>.</p>",
        )
        assert response.status_code == 200, response.text
        message_id = response.json()["id"]
        stack.wait_for_status(message_id, "delivered")

    [received] = sink.received
    assert received.mail_from == "shop@shop.example.com"
    assert sorted(received.rcpt_tos) == ["bob@example.org", "carol@example.org", "secret@example.net"]
    assert b"secret@example.net" not in received.data
    assert verifies(received.data, stack.domain)

    parsed = email.message_from_bytes(received.data, policy=email.policy.default)
    assert parsed["From"] == "Acme Shop <shop@shop.example.com>"
    assert parsed["To"] == "Bob Example <bob@example.org>"
    assert parsed["Cc"] == "carol@example.org"
    assert parsed["Reply-To"] == "help@shop.example.com"
    assert parsed["Subject"] == "Your order ✓"
    assert parsed["Bcc"] is None
    assert parsed["Message-ID"] == f"<{message_id}@shop.example.com>"
    assert parsed.get_content_type() == "multipart/alternative"
    assert parsed.get_body(("plain",)).get_content() == "Thanks for your order.\r\n"
    assert parsed.get_body(("html",)).get_content() == "<p>Thanks for your <b>order</b>.</p>\r\n"
    message = Message.objects.get(public_id=message_id)
    assert message.message_id_header == parsed["Message-ID"]
    assert list(message.events.values_list("type", flat=True)) == ["accepted", "delivered"]


def test_each_recipient_gets_its_own_transaction_and_signed_return_path_over_one_connection():
    return_path_domain = "bounces.shop.example.com"
    with smtp_sink() as sink, running(email_url=sink.url, MAILSERVICE_RETURN_PATH_DOMAIN=return_path_domain) as stack:
        message_id = stack.send(to=["bob@example.org"], cc="carol@example.org", text="Hello").json()["id"]
        stack.wait_for_status(message_id, "delivered")

    assert [received.rcpt_tos for received in sink.received] == [["bob@example.org"], ["carol@example.org"]]
    assert [received.mail_from for received in sink.received] == [
        f"{verp_local_part(message_id, index)}@{return_path_domain}" for index in (0, 1)
    ]
    assert len({received.peer for received in sink.received}) == 1
    assert all(verifies(received.data, stack.domain) for received in sink.received)
    assert len({received.data for received in sink.received}) == 1


def test_a_running_worker_signs_with_the_new_dkim_key_once_it_is_active():
    """The worker caches parsed keys per process; the cache is keyed by key, so a switch needs no restart."""
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        first = stack.send(text="before").json()["id"]
        stack.wait_for_status(first, "delivered")
        new = dkim_rotate(domain=stack.domain)
        pending = stack.send(text="while pending").json()["id"]
        stack.wait_for_status(pending, "delivered")
        dkim_activate(key=new, found_in_dns=False, actor="test")
        after = stack.send(text="after").json()["id"]
        stack.wait_for_status(after, "delivered")

    selectors = [re.search(rb"\bs=([^;]+);", received.data).group(1).decode() for received in sink.received]
    assert selectors == [FIRST_DKIM_SELECTOR, FIRST_DKIM_SELECTOR, new.selector]
    assert all(verifies(received.data, stack.domain) for received in sink.received)


def test_a_message_deferred_with_451_is_delivered_on_a_later_attempt():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        sink.behaviour.data_replies = ["451 4.3.0 Try again later"]
        message_id = stack.send(text="Hello").json()["id"]
        stack.wait_for_status(message_id, "delivered")

    assert len(sink.received) == 1
    message = Message.objects.get(public_id=message_id)
    assert message.attempts == 2
    assert list(message.events.values_list("type", flat=True)) == ["accepted", "deferred", "delivered"]
    assert "451 4.3.0 Try again later" in message.events.get(type="deferred").detail


def test_a_permanent_550_bounces_the_message():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        sink.behaviour.data_replies = ["550 5.7.1 Message rejected"]
        message_id = stack.send(text="Hello").json()["id"]
        stack.wait_for_status(message_id, "bounced")

    message = Message.objects.get(public_id=message_id)
    assert (message.attempts, message.last_error) == (1, "550 5.7.1 Message rejected (reason: policy)")
    assert sink.received == []


def test_a_recipient_refused_with_550_does_not_stop_delivery_to_the_others():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        sink.behaviour.rejected_rcpts = {"gone@example.org": "550 5.1.1 No such user"}
        message_id = stack.send(to=["bob@example.org", "gone@example.org"], text="Hello").json()["id"]
        stack.wait_for_status(message_id, "delivered")

    assert [received.rcpt_tos for received in sink.received] == [["bob@example.org"]]
    rejected = Message.objects.get(public_id=message_id).events.get(type="recipient_rejected")
    assert (rejected.recipient, rejected.detail) == (
        "gone@example.org",
        "550 5.1.1 No such user (reason: user_unknown)",
    )


def test_an_unreachable_relay_fails_the_message_once_every_attempt_is_used():
    with running(email_url=f"smtp://127.0.0.1:{free_port()}", MAILSERVICE_DISPATCH_MAX_ATTEMPTS="3") as stack:
        message_id = stack.send(text="Hello").json()["id"]
        stack.wait_for_status(message_id, "failed")

    message = Message.objects.get(public_id=message_id)
    assert message.attempts == 3
    assert "ConnectionRefusedError" in message.last_error
    assert list(message.events.values_list("type", flat=True)) == ["accepted", "deferred", "deferred", "failed"]


def test_a_worker_killed_mid_send_is_replaced_and_the_message_goes_out_exactly_once():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        hold = sink.behaviour.hold = threading.Event()
        message_id = stack.send(text="Hello").json()["id"]
        wait_until(lambda: sink.in_data == 1, timeout=30, message="the worker to reach DATA")

        stack.worker.kill()
        sink.behaviour.hold = None
        hold.set()
        stack.worker.start()
        stack.wait_for_status(message_id, "delivered")
        # Past another lease, the visibility timeout and many sweeps: nothing goes out a second time.
        time.sleep(5)

    assert len(sink.received) == 1
    assert Message.objects.get(public_id=message_id).attempts == 2


def test_a_send_while_the_broker_is_down_is_accepted_and_delivered_once_it_is_back():
    broker_port = free_port()
    broker_url = f"redis://127.0.0.1:{broker_port}/0"
    with smtp_sink() as sink, running(email_url=sink.url, CELERY_BROKER_URL=broker_url, start_worker=False) as stack:
        started = time.monotonic()
        response = stack.send(text="Hello")
        assert response.status_code == 200, response.text
        assert time.monotonic() - started < 10
        message_id = response.json()["id"]

        with redis_server(broker_port):
            stack.worker.start()
            stack.wait_for_status(message_id, "delivered")
            stack.worker.stop()

    assert len(sink.received) == 1


def test_a_suppressed_recipient_is_never_contacted_and_an_all_suppressed_send_fails():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        suppression_add(domain=stack.domain, address="Gone@Example.org", reason=SuppressionReason.BOUNCE)
        partly = stack.send(to=["bob@example.org", "gone@example.org"], text="Hello")
        wholly = stack.send(to="Gone <gone@example.org>", text="Hello")
        assert (partly.status_code, wholly.status_code) == (200, 200)  # the API has no per-recipient results

        stack.wait_for_status(partly.json()["id"], "delivered")
        stack.wait_for_status(wholly.json()["id"], "failed")

    assert [received.rcpt_tos for received in sink.received] == [["bob@example.org"]]
    suppressed = MessageEvent.objects.filter(type=EventType.SUPPRESSED).values_list("message__public_id", "recipient")
    assert sorted(suppressed) == sorted(
        [(partly.json()["id"], "gone@example.org"), (wholly.json()["id"], "gone@example.org")]
    )

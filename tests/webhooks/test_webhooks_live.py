"""Webhooks end to end with real processes: gunicorn, the worker with beat, the webhooks worker on
its own queue, the inbound SMTP server, an aiosmtpd relay and a webhook receiver on loopback."""

import os
import smtplib
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from email.mime.application import MIMEApplication
from email.mime.multipart import MIMEMultipart
from email.mime.text import MIMEText

import httpx
import pytest

from apikeys.models import ApiKey
from domains.models import Domain
from messaging.models import EventType, Message, MessageEvent
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory
from tests.harness import (
    FAST_DISPATCH,
    CeleryWorker,
    celery_worker,
    inbound_smtp_server,
    smtp_sink,
    wait_until,
    web_server,
)
from tests.inbound.mail import RETURN_PATH_DOMAIN, arf, dsn, verp_address, wire_bytes
from tests.webhooks.receiver import Receiver, webhook_receiver
from webhooks.models import DeliveryStatus, WebhookDelivery
from webhooks.services import endpoint_create

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

FAST_WEBHOOKS = {"MAILSERVICE_WEBHOOK_ALLOW_PRIVATE": "true", "MAILSERVICE_WEBHOOK_PUMP_INTERVAL": "0.3"}


@dataclass
class Stack:
    base_url: str
    key_header: dict[str, str]
    domain: Domain
    secret: str
    receiver: Receiver
    worker: CeleryWorker
    webhooks_worker: CeleryWorker
    inbound_port: int

    def send(self, **body) -> str:
        payload = {"from": f"shop@{self.domain.name}", "to": "bob@example.org", "subject": "Hi", "text": "Hello"}
        response = httpx.post(f"{self.base_url}/v1/send", headers=self.key_header, json=payload | body, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()["id"]

    def wait_for_event(self, type_: str, message_id: str, timeout: float = 30) -> dict:
        def found() -> list[dict]:
            return [e for e in self.receiver.events(type_) if e["data"]["id"] == message_id]

        wait_until(
            lambda: found(),
            timeout=timeout,
            interval=0.1,
            message=f"{type_} for {message_id} (logs: {self.worker.log_path}, {self.webhooks_worker.log_path})",
        )
        return found()[0]

    def smtp(self, mail, *, to: str) -> None:
        with smtplib.SMTP("127.0.0.1", self.inbound_port, timeout=10) as smtp:
            smtp.sendmail("", [to], wire_bytes(mail))


@contextmanager
def running(*, email_url: str, **env: str) -> Iterator[Stack]:
    domain = DomainFactory(name="shop.example.com")
    key = ApiKeyFactory(domain=domain)
    suffix = uuid.uuid4().hex
    settings = (
        FAST_DISPATCH
        | FAST_WEBHOOKS
        | {
            "EMAIL_URL": email_url,
            "CELERY_TASK_DEFAULT_QUEUE": f"test-{suffix}",
            "MAILSERVICE_WEBHOOK_QUEUE": f"webhooks-{suffix}",
            "MAILSERVICE_RETURN_PATH_DOMAIN": RETURN_PATH_DOMAIN,
        }
        | env
    )
    with ExitStack() as stack:
        receiver = stack.enter_context(webhook_receiver())
        secret = endpoint_create(domain=domain, url=receiver.url, event_types=[]).secret
        base_url = stack.enter_context(web_server(workers=1, **settings))
        port = stack.enter_context(inbound_smtp_server(**settings))
        worker = stack.enter_context(celery_worker(threads=4, **settings))
        webhooks = stack.enter_context(
            celery_worker(beat=False, threads=8, queues=settings["MAILSERVICE_WEBHOOK_QUEUE"], **settings)
        )
        yield Stack(
            base_url, {"Authorization": f"Bearer {key.secret}"}, domain, secret, receiver, worker, webhooks, port
        )


def test_the_application_hears_of_sends_deliveries_bounces_complaints_and_received_mail():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        bounced_id = stack.send(to="gone@example.org")
        assert stack.wait_for_event("email.accepted", bounced_id)["data"]["status"] == "accepted"
        delivered = stack.wait_for_event("email.delivered", bounced_id)
        assert delivered["data"]["status"] == "delivered"
        assert delivered["data"]["smtp_response"].startswith("250")

        message = Message.objects.get(public_id=bounced_id)
        stack.smtp(dsn(message=message, recipient="gone@example.org"), to=verp_address(message))
        bounce = stack.wait_for_event("email.bounced", bounced_id)["data"]
        assert (bounce["bounce_type"], bounce["recipient"], bounce["status_code"]) == (
            "hard",
            "gone@example.org",
            "5.1.1",
        )

        complained_id = stack.send(to="grumpy@example.org")
        stack.wait_for_event("email.delivered", complained_id)
        message = Message.objects.get(public_id=complained_id)
        stack.smtp(
            arf(message=message, recipient="grumpy@example.org", to=f"fbl@{RETURN_PATH_DOMAIN}"),
            to=f"fbl@{RETURN_PATH_DOMAIN}",
        )
        complaint = stack.wait_for_event("email.complained", complained_id)["data"]
        assert (complaint["feedback_type"], complaint["recipient"]) == ("abuse", "grumpy@example.org")

        mail = MIMEMultipart("mixed")
        mail["From"], mail["To"], mail["Cc"] = (
            "Alice <alice@example.org>",
            f"help@{stack.domain.name}",
            "carol@example.org",
        )
        mail["Subject"], mail["Message-ID"] = "Invoice", "<inv-1@example.org>"
        alternative = MIMEMultipart("alternative")
        alternative.attach(MIMEText("See attached.", "plain"))
        alternative.attach(MIMEText("<p>See <b>attached</b>.</p>", "html"))
        mail.attach(alternative)
        pdf = MIMEApplication(b"%PDF-1.4 fake", "pdf")
        pdf.add_header("Content-Disposition", "attachment", filename="invoice.pdf")
        pdf.add_header("Content-ID", "<pdf1@example.org>")
        mail.attach(pdf)
        stack.smtp(mail, to=f"help@{stack.domain.name}")
        wait_until(lambda: stack.receiver.events("email.received"), timeout=30, message="email.received")
        received = stack.receiver.events("email.received")[0]["data"]
        assert (received["from"], received["to"], received["cc"]) == (
            "Alice <alice@example.org>",
            [f"help@{stack.domain.name}"],
            ["carol@example.org"],
        )
        assert (received["subject"], received["text"], received["html"]) == (
            "Invoice",
            "See attached.",
            "<p>See <b>attached</b>.</p>",
        )
        assert {"name": "Message-ID", "value": "<inv-1@example.org>"} in received["headers"]
        [attachment] = received["attachments"]
        assert {k: attachment[k] for k in ("filename", "content_type", "size", "content_id")} == {
            "filename": "invoice.pdf",
            "content_type": "application/pdf",
            "size": 13,
            "content_id": "pdf1@example.org",
        }
        fetched = httpx.get(stack.base_url + attachment["url"], headers=stack.key_header, timeout=10)
        assert (fetched.status_code, fetched.content) == (200, b"%PDF-1.4 fake")
        raw = httpx.get(stack.base_url + received["raw_url"], headers=stack.key_header, timeout=10)
        assert raw.status_code == 200 and raw.headers["content-type"] == "message/rfc822"
        assert b"Subject: Invoice" in raw.content and b"invoice.pdf" in raw.content
        unsigned = httpx.get(
            stack.base_url + received["raw_url"].partition("?")[0], headers=stack.key_header, timeout=10
        )
        assert unsigned.status_code == 403

        # Every request verifies with the standardwebhooks package, and each event came once.
        verified = stack.receiver.verified(stack.secret)
        assert len({event["id"] for event in verified}) == len(verified) >= 7
        assert len(sink.received) == 2


def test_an_endpoint_that_answers_500_first_gets_the_event_again_within_ten_seconds():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        stack.receiver.behaviour.statuses = [500]
        message_id = stack.send()
        stack.wait_for_event("email.accepted", message_id)
        first = stack.receiver.requests[0]

        def again() -> list:
            return [r for r in stack.receiver.requests[1:] if r.headers["webhook-id"] == first.headers["webhook-id"]]

        wait_until(again, timeout=30, message="the same event again")
        second = again()[0]
        assert second.at - first.at < 10


def test_a_webhooks_worker_killed_mid_delivery_loses_no_event():
    with (
        smtp_sink() as sink,
        running(email_url=sink.url, MAILSERVICE_WEBHOOK_TIMEOUT="2", MAILSERVICE_WEBHOOK_LEASE_SECONDS="4") as stack,
    ):
        hold = stack.receiver.behaviour.hold = __import__("threading").Event()
        stack.webhooks_worker.wait_ready()
        message_id = stack.send()
        # Both events may be in flight at once; the kill must land while email.accepted is held.
        wait_until(
            lambda: any(r.event["type"] == "email.accepted" for r in stack.receiver.requests),
            timeout=30,
            message="the email.accepted request",
        )
        stack.webhooks_worker.kill()
        stack.receiver.behaviour.hold = None
        hold.set()
        stack.webhooks_worker.start()

        wait_until(
            lambda: (
                not WebhookDelivery.objects.exclude(status=DeliveryStatus.SUCCEEDED).exists()
                and {"email.accepted", "email.delivered"} <= {e["type"] for e in stack.receiver.events()}
            ),
            timeout=60,
            interval=0.2,
            message=f"every delivery to succeed (log: {stack.webhooks_worker.log_path})",
        )
        accepted = [r for r in stack.receiver.requests if r.event["type"] == "email.accepted"]
        assert len(accepted) >= 2 and len({r.headers["webhook-id"] for r in accepted}) == 1
        assert accepted[0].event["data"]["id"] == message_id


def _dispatch_seconds(stack: Stack, count: int) -> float:
    started = time.monotonic()
    ids = [stack.send(to=f"rcpt{n}@example.org") for n in range(count)]
    wait_until(
        lambda: Message.objects.filter(public_id__in=ids, status="delivered").count() == count,
        timeout=120,
        interval=0.1,
        message="the batch to be delivered",
    )
    return time.monotonic() - started


def test_a_backlog_to_a_slow_endpoint_does_not_slow_the_dispatch_of_other_mail():
    """BACKLOG events (WEBHOOK_BACKLOG=10000 for the issue's full size) to an endpoint that takes 2 s."""
    backlog = int(os.environ.get("WEBHOOK_BACKLOG", "300"))
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        stack.receiver.behaviour.delay = 2.0
        stack.worker.wait_ready()
        stack.webhooks_worker.wait_ready()
        quiet = _dispatch_seconds(stack, 20)
        wait_until(
            lambda: not MessageEvent.objects.filter(published_at__isnull=True).exists(), timeout=30, message="fan-out"
        )

        other = DomainFactory(name="slow.example.net")
        endpoint_create(domain=other, url=stack.receiver.url, event_types=[])
        messages = Message.objects.bulk_create(MessageFactory.build(domain=other) for _ in range(backlog))
        MessageEvent.objects.bulk_create(MessageEvent(message=m, type=EventType.ACCEPTED) for m in messages)
        wait_until(
            lambda: WebhookDelivery.objects.filter(endpoint__domain=other).count() == backlog,
            timeout=60 + backlog / 50,
            message="the backlog",
        )

        busy = _dispatch_seconds(stack, 20)
        assert busy < quiet * 2 + 2, (quiet, busy)
        # The slow endpoint was being served meanwhile, never more than its cap at once.
        wait_until(
            WebhookDelivery.objects.filter(endpoint__domain=other, status=DeliveryStatus.SUCCEEDED).exists,
            timeout=30,
            message="the slow endpoint to be served",
        )
        assert WebhookDelivery.objects.filter(endpoint__domain=other, lease_expires_at__isnull=False).count() <= 4


def test_a_test_key_produces_every_simulated_event_through_the_webhook_and_nothing_reaches_smtp():
    with smtp_sink() as sink, running(email_url=sink.url) as stack:
        test_key = ApiKeyFactory(domain=stack.domain)
        ApiKey.objects.filter(pk=test_key.pk).update(is_test=True)
        live_header, stack.key_header = stack.key_header, {"Authorization": f"Bearer {test_key.secret}"}
        sent = {address: stack.send(to=address) for address in SIMULATOR_OUTCOMES}

        for address, (last, fields) in SIMULATOR_OUTCOMES.items():
            event = stack.wait_for_event(last, sent[address])
            assert event["test"] is True
            assert {name: event["data"][name] for name in fields} == fields
        assert stack.wait_for_event("email.delivered", sent["complained@simulator.test"])["test"] is True
        assert all(event["test"] for event in stack.receiver.verified(stack.secret))
        assert sink.received == []

        listed = httpx.get(f"{stack.base_url}/v1/messages", headers=live_header, timeout=10).json()["data"]
        assert listed == []
        hidden = httpx.get(f"{stack.base_url}/v1/messages/{sent['bounced@simulator.test']}", headers=live_header)
        assert hidden.status_code == 404


SIMULATOR_OUTCOMES = {
    "delivered@simulator.test": ("email.delivered", {"status": "delivered"}),
    "bounced@simulator.test": ("email.bounced", {"bounce_type": "hard", "recipient": "bounced@simulator.test"}),
    "softbounce@simulator.test": ("email.bounced", {"bounce_type": "soft", "status_code": "4.2.2"}),
    "complained@simulator.test": ("email.complained", {"feedback_type": "abuse", "status": "complained"}),
    "anyone@example.org": ("email.delivered", {"recipient": "anyone@example.org"}),
}

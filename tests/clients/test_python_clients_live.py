"""Every Python style against a real server process: sends read back through GET, and the three
failures (a paused service, a bad key, a foreign sender) surface in each style's documented form."""

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from mailservice_client import (
    AsyncMailService,
    MailService,
    MailServiceError,
    NotFoundError,
    SendingPausedError,
    ServiceUnavailableError,
)
from mailservice_client.compat import boto3, postmark, resend, sendgrid

from domains.services import sending_pause
from messaging.models import Message
from tests.clients.outage import unreachable_database_url
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DOMAIN = "py.example.com"
FROM = f"App <app@{DOMAIN}>"
TO = ["a@example.org", "Bee <b@example.org>"]
CC = "c@example.org"


@pytest.fixture(scope="module")
def base_url(django_db_setup, django_db_blocker) -> Iterator[str]:
    """One server for the module; each test's rows are committed, so the server sees them."""
    with web_server() as url:
        yield url


@pytest.fixture
def key(transactional_db) -> str:
    return ApiKeyFactory(domain=DomainFactory(name=DOMAIN)).secret


def send_native(base_url: str, key: str, sender: str, subject: str) -> str:
    with MailService(api_key=key, base_url=base_url) as client:
        return client.send({"from": sender, "to": TO, "cc": CC, "subject": subject, "text": f"Body of {subject}"})["id"]


def send_native_async(base_url: str, key: str, sender: str, subject: str) -> str:
    async def send() -> str:
        async with AsyncMailService(api_key=key, base_url=base_url) as client:
            body = {"from": sender, "to": TO, "cc": CC, "subject": subject, "text": f"Body of {subject}"}
            return (await client.send(body))["id"]

    return asyncio.run(send())


def send_boto3(base_url: str, key: str, sender: str, subject: str) -> str:
    ses = boto3.client("sesv2", region_name="eu-west-1", endpoint_url=base_url, api_key=key)
    out = ses.send_email(
        FromEmailAddress=sender,
        Destination={"ToAddresses": TO, "CcAddresses": [CC]},
        Content={"Simple": {"Subject": {"Data": subject}, "Body": {"Text": {"Data": f"Body of {subject}"}}}},
    )
    metadata = out["ResponseMetadata"]
    assert (metadata["HTTPStatusCode"], metadata["RetryAttempts"]) == (200, 0)
    assert metadata["RequestId"]
    return out["MessageId"]


def send_postmark(base_url: str, key: str, sender: str, subject: str) -> str:
    async def send() -> str:
        async with postmark.ServerClient(key, base_url=base_url) as client:
            out = await client.outbound.send(
                {
                    "sender": sender,
                    "to": ", ".join(TO),
                    "cc": CC,
                    "subject": subject,
                    "text_body": f"Body of {subject}",
                    "message_stream": "outbound",
                }
            )
        assert (out.error_code, out.message, out.to, out.success) == (0, "OK", ", ".join(TO), True)
        assert out.submitted_at.tzinfo is not None
        return out.message_id

    return asyncio.run(send())


def send_resend(base_url: str, key: str, sender: str, subject: str, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(resend, "api_key", key)
    monkeypatch.setattr(resend, "api_url", base_url)
    out = resend.Emails.send({"from": sender, "to": TO, "cc": CC, "subject": subject, "text": f"Body of {subject}"})
    return out["id"]


def send_sendgrid(base_url: str, key: str, sender: str, subject: str) -> str:
    client = sendgrid.SendGridAPIClient(key, host=base_url)
    response = client.send(
        {
            "from": {"email": sender.rpartition("<")[2].rstrip(">"), "name": "App"},
            "personalizations": [{"to": [{"email": TO[0]}, {"email": "b@example.org", "name": "Bee"}], "cc": [CC]}],
            "subject": subject,
            "content": [{"type": "text/plain", "value": f"Body of {subject}"}],
        }
    )
    assert (response.status_code, response.statusCode, response.body) == (202, 202, "")
    return response.headers["X-Message-Id"]


STYLES: dict[str, Callable[..., str]] = {
    "native": send_native,
    "native-async": send_native_async,
    "boto3": send_boto3,
    "postmark": send_postmark,
    "resend": send_resend,
    "sendgrid": send_sendgrid,
}


def send_with(style: str, base_url: str, key: str, sender: str, subject: str, monkeypatch: pytest.MonkeyPatch) -> str:
    if style == "resend":
        return send_resend(base_url, key, sender, subject, monkeypatch)
    return STYLES[style](base_url, key, sender, subject)


@pytest.mark.parametrize("style", STYLES)
def test_each_style_sends_a_message_that_reads_back(style, base_url, key, monkeypatch):
    subject = f"Hello from {style}"
    message_id = send_with(style, base_url, key, FROM, subject, monkeypatch)

    with MailService(api_key=key, base_url=base_url) as client:
        message = client.messages.get(message_id)
    assert (message["from"], message["to"], message["subject"], message["text"]) == (
        FROM,
        TO,
        subject,
        f"Body of {subject}",
    )
    assert Message.objects.get(public_id=message_id).cc == [CC]  # the Message resource has no cc


def failure_of(style: str, base_url: str, key: str, sender: str, monkeypatch) -> tuple[str, int | None, str | None]:
    """(code, HTTP status, request id) as the style's documented error form carries them."""
    with pytest.raises(MailServiceError) as raised:
        send_with(style, base_url, key, sender, "must fail", monkeypatch)
    error = raised.value
    if style == "boto3":
        assert isinstance(error, boto3.ClientError)
        assert error.operation_name == "SendEmail"
        assert str(error).startswith(f"An error occurred ({error.code}) when calling the SendEmail operation")
        metadata = error.response["ResponseMetadata"]
        assert metadata["RetryAttempts"] == 0
        return error.response["Error"]["Code"], metadata["HTTPStatusCode"], metadata["RequestId"]
    return error.code, error.status, error.request_id


@pytest.mark.parametrize("style", STYLES)
def test_each_style_reports_a_paused_service_a_bad_key_and_a_foreign_sender(style, base_url, key, monkeypatch):
    code, status, request_id = failure_of(style, base_url, "ms_not_a_real_key", FROM, monkeypatch)
    assert (code, status) == ("Unauthorized", 401) and request_id

    code, status, request_id = failure_of(style, base_url, key, "app@elsewhere.example.net", monkeypatch)
    assert (code, status) == ("SenderNotAllowed", 403) and request_id

    sending_pause(domain=None, actor="test", reason="live test of the paused error")
    code, status, request_id = failure_of(style, base_url, key, FROM, monkeypatch)
    assert (code, status) == ("SendingPaused", 503) and request_id
    assert not Message.objects.exists()


def test_the_native_client_follows_cursors_and_reports_missing_messages(base_url, key):
    with MailService(api_key=key, base_url=base_url) as client:
        sent = [client.send({"from": FROM, "to": TO, "subject": f"n{i}", "text": "x"})["id"] for i in range(3)]
        first = client.messages.list(limit=2)
        every = [message["id"] for message in client.messages.iter(limit=1, direction="sent")]
        with pytest.raises(NotFoundError) as missing:
            client.messages.get("msg_does_not_exist")

    assert (len(first["data"]), first["has_more"]) == (2, True)
    assert sorted(every) == sorted(sent)
    assert (missing.value.status, missing.value.code) == (404, "NotFound") and missing.value.request_id


def test_the_async_client_follows_cursors(base_url, key):
    async def read() -> list[str]:
        async with AsyncMailService(api_key=key, base_url=base_url) as client:
            for i in range(3):
                await client.send({"from": FROM, "to": TO, "subject": f"n{i}", "text": "x"})
            return [message["id"] async for message in client.messages.iter(limit=2)]

    assert len(set(asyncio.run(read()))) == 3


def test_clients_read_the_key_and_base_url_from_the_environment(base_url, key, monkeypatch):
    monkeypatch.setenv("MAILSERVICE_BASE_URL", base_url)
    monkeypatch.setenv("MAILSERVICE_API_KEY", key)
    params: dict[str, Any] = {"from": FROM, "to": TO, "subject": "env", "text": "x"}

    native_id = MailService().send(params)["id"]
    resend_id = resend.Emails.send(params)["id"]
    boto3_id = boto3.client("sesv2").send_email(
        FromEmailAddress=FROM,
        Destination={"ToAddresses": TO},
        Content={"Simple": {"Subject": {"Data": "env"}, "Body": {"Text": {"Data": "x"}}}},
    )["MessageId"]

    assert Message.objects.filter(public_id__in=[native_id, resend_id, boto3_id]).count() == 3


def test_a_database_outage_is_not_a_paused_domain(base_url, key):
    """Both are 503s; the code tells them apart, so each reaches the caller as its own class."""
    sending_pause(domain=None, actor="test", reason="live test of the paused error")
    with MailService(api_key=key, base_url=base_url) as client, pytest.raises(SendingPausedError):
        client.send({"from": FROM, "to": TO, "subject": "paused", "text": "x"})

    with web_server(DATABASE_URL=unreachable_database_url()) as down_url:
        client = MailService(api_key=key, base_url=down_url)
        with client, pytest.raises(ServiceUnavailableError) as raised:
            client.send({"from": FROM, "to": TO, "subject": "outage", "text": "x"})
    error = raised.value
    assert not isinstance(error, SendingPausedError)
    assert (error.code, error.status) == ("ServiceUnavailable", 503) and error.request_id


def test_idempotent_sends_through_the_python_clients(base_url, key):
    body = {"from": FROM, "to": TO, "subject": "Once", "text": "x"}
    with MailService(api_key=key, base_url=base_url) as client:
        first = client.send(body, idempotency_key="py-native-1")
        assert client.send(body, idempotency_key="py-native-1") == first
        with pytest.raises(MailServiceError) as reused:
            client.send({**body, "subject": "Other"}, idempotency_key="py-native-1")
        assert (reused.value.code, reused.value.status) == ("IdempotencyKeyReused", 409)

    async def send_async() -> str:
        async with AsyncMailService(api_key=key, base_url=base_url) as client:
            return (await client.send(body, idempotency_key="py-native-1"))["id"]

    assert asyncio.run(send_async()) == first["id"]

    resend.api_key, resend.api_url = key, base_url
    params = {"from": FROM, "to": TO, "subject": "Once", "text": "x"}
    once = resend.Emails.send(params, {"idempotency_key": "py-resend-1"})
    assert resend.Emails.send(params, {"idempotency_key": "py-resend-1"}) == once
    assert Message.objects.filter(domain__name=DOMAIN).count() == 2


def test_the_native_clients_send_a_batch_in_order_and_name_a_bad_item(base_url, key):
    batch = [{"from": FROM, "to": TO, "subject": f"b{i}", "text": "x"} for i in range(3)]
    with MailService(api_key=key, base_url=base_url) as client:
        sent = client.send_batch(batch, idempotency_key="py-batch-1")
        assert client.send_batch(batch, idempotency_key="py-batch-1") == sent
        with pytest.raises(MailServiceError) as refused:
            client.send_batch([*batch, {**batch[0], "from": "eve@elsewhere.example"}])

    async def send_async() -> list[str]:
        async with AsyncMailService(api_key=key, base_url=base_url) as client:
            return [result["id"] for result in await client.send_batch(batch[:2])]

    ids = [result["id"] for result in sent] + asyncio.run(send_async())
    subjects = dict(Message.objects.filter(public_id__in=ids).values_list("public_id", "subject"))
    assert [subjects[each] for each in ids] == ["b0", "b1", "b2", "b0", "b1"]
    assert (refused.value.code, refused.value.status) == ("SenderNotAllowed", 403)
    assert refused.value.message.startswith("messages.3.from: ")


def test_the_native_clients_manage_suppressions_and_read_events(base_url):
    from apikeys.models import Permission

    key = ApiKeyFactory(domain=DomainFactory(name=DOMAIN), permissions=tuple(Permission.values)).secret
    with MailService(api_key=key, base_url=base_url) as client:
        sent = client.send({"from": FROM, "to": "blocked@example.org", "subject": "e", "text": "x"})["id"]
        added = client.suppressions.add("Blocked <Blocked@Example.org>", detail="asked")
        for n in range(3):
            client.suppressions.add(f"more{n}@example.org")
        again = client.suppressions.add("blocked@example.org", detail="other")
        listed = [entry["email"] for entry in client.suppressions.iter(limit=2)]
        manual = client.suppressions.list(reason="manual", email="blocked@example.org")
        client.suppressions.remove("blocked@example.org")
        with pytest.raises(NotFoundError):
            client.suppressions.get("blocked@example.org")
        history = client.message_events(sent)
        stream = list(client.events(types=["email.accepted"], limit=1))

    assert added == again and added["email"] == "blocked@example.org" and added["detail"] == "asked"
    assert listed[0] == "more2@example.org" and sorted(listed) == sorted(
        [*(f"more{n}@example.org" for n in range(3)), "blocked@example.org"]
    )
    assert [entry["email"] for entry in manual["data"]] == ["blocked@example.org"]
    assert [event["type"] for event in history] == ["email.accepted"] and history[0]["data"]["id"] == sent
    assert [event["id"] for event in stream] == [history[0]["id"]]

    async def read() -> tuple[list[str], list[str]]:
        async with AsyncMailService(api_key=key, base_url=base_url) as client:
            await client.suppressions.add("async@example.org")
            emails = [entry["email"] async for entry in client.suppressions.iter(limit=1)]
            await client.suppressions.remove("async@example.org")
            events = [event["id"] async for event in client.events(since="2000-01-01T00:00:00Z")]
            return emails, events

    emails, events = asyncio.run(read())
    assert "async@example.org" in emails and events == [history[0]["id"]]

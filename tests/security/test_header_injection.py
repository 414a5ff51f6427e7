"""Header injection, checked on the wire: whatever a header-bound field carries, the message a real
worker hands to a real SMTP peer has exactly the headers it should, each once.

Every field that ends up in a header (the From display name, To/Cc/Reply-To display names, the
subject, a template variable rendered into the subject) gets every attempt, through the native API
and through each Python compatibility client. Refusing the input (400, or the client's local
ValidationError) is a pass too; a 500 is not.
"""

import asyncio
import email
import email.policy
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from mailservice_client import MailServiceError
from mailservice_client.compat import boto3, postmark, resend, sendgrid

from messaging.models import Message, Status
from tests.factories import ApiKeyFactory, DomainFactory, TemplateFactory, TemplateVersionFactory
from tests.harness import FAST_DISPATCH, SmtpSink, celery_worker, smtp_sink, wait_until, web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DOMAIN = "inject.example.com"
INJECTIONS = {
    "crlf": "\r\nX-Injected: crlf",
    "lf": "\nX-Injected: lf",
    "cr": "\rX-Injected: cr",
    "blank-line": "\r\n\r\nX-Injected: body",
    "bcc": "\r\nBcc: victim@evil.example",
    "line-separator": "\u2028X-Injected: ls",
    "paragraph-separator": "\u2029X-Injected: ps",
    "next-line": "\u0085X-Injected: nel",
    "nul": "\x00X-Injected: nul",
    "vertical-tab-form-feed": "\x0b\x0cX-Injected: vtff",
    "encoded-word": "=?utf-8?q?=0D=0AX-Injected:_ew?=",
    "encoded-word-alone": " =?utf-8?b?DQpYLUluamVjdGVkOiBldw==?=",  # "\r\nX-Injected: ew"
}
FIELDS = ["from-name", "to-name", "cc-name", "reply-to-name", "subject", "template-variable"]
# What a message may carry, each at most once (the template variant has no Cc-less difference).
ALLOWED = {
    b"From",
    b"To",
    b"Cc",
    b"Reply-To",
    b"Subject",
    b"Date",
    b"Message-ID",
    b"Feedback-ID",  # the service's own, its fields reduced to safe characters (messaging/feedback_id.py)
    b"MIME-Version",
    b"Content-Type",
    b"Content-Transfer-Encoding",
    b"DKIM-Signature",
}


@dataclass(frozen=True)
class Case:
    field: str
    value: str

    def mailboxes(self) -> dict[str, str]:
        def named(name: str, address: str, field: str) -> str:
            return f"{name}{self.value if self.field == field else ''} <{address}>"

        return {
            "from": named("Shop", f"shop@{DOMAIN}", "from-name"),
            "to": named("Bob", "bob@example.org", "to-name"),
            "cc": named("Carol", "carol@example.org", "cc-name"),
            "reply_to": named("Help", f"help@{DOMAIN}", "reply-to-name"),
        }

    @property
    def subject(self) -> str:
        return "Hello" + (self.value if self.field == "subject" else "")


CASES = [Case(field, value) for field in FIELDS for value in INJECTIONS.values()]
CASE_IDS = [f"{field}-{name}" for field in FIELDS for name in INJECTIONS]


def native(base_url: str, key: str, case: Case) -> str:
    m = case.mailboxes()
    body: dict[str, Any] = {"from": m["from"], "to": [m["to"]], "cc": m["cc"], "replyTo": m["reply_to"]}
    if case.field == "template-variable":
        body["template"] = {"id": "greeting", "variables": {"name": "Bob" + case.value}}
    else:
        body |= {"subject": case.subject, "text": "Body"}
    response = httpx.post(f"{base_url}/v1/send", headers={"Authorization": f"Bearer {key}"}, json=body, timeout=30)
    if response.status_code == 400:
        raise MailServiceError(response.text, code=response.json()["error"]["code"], status=400)
    assert response.status_code == 200, response.text
    return response.json()["id"]


def with_boto3(base_url: str, key: str, case: Case) -> str:
    m = case.mailboxes()
    ses = boto3.client("sesv2", endpoint_url=base_url, api_key=key)
    return ses.send_email(
        FromEmailAddress=m["from"],
        Destination={"ToAddresses": [m["to"]], "CcAddresses": [m["cc"]]},
        ReplyToAddresses=[m["reply_to"]],
        Content={"Simple": {"Subject": {"Data": case.subject}, "Body": {"Text": {"Data": "Body"}}}},
    )["MessageId"]


def with_postmark(base_url: str, key: str, case: Case) -> str:
    m = case.mailboxes()

    async def send() -> str:
        async with postmark.ServerClient(key, base_url=base_url) as client:
            message = {"sender": m["from"], "to": m["to"], "cc": m["cc"], "reply_to": m["reply_to"]}
            out = await client.outbound.send(message | {"subject": case.subject, "text_body": "Body"})
            return out.message_id

    return asyncio.run(send())


def with_resend(base_url: str, key: str, case: Case) -> str:
    m = case.mailboxes()
    resend.api_key, resend.api_url = key, base_url
    params: dict[str, Any] = {"from": m["from"], "to": m["to"], "cc": m["cc"], "reply_to": m["reply_to"]}
    if case.field == "template-variable":
        params["template"] = {"id": "greeting", "variables": {"name": "Bob" + case.value}}
    else:
        params |= {"subject": case.subject, "text": "Body"}
    return resend.Emails.send(params)["id"]


def with_sendgrid(base_url: str, key: str, case: Case) -> str:
    def address(mailbox: str) -> dict[str, str]:
        name, _, rest = mailbox.rpartition(" <")
        return {"email": rest.rstrip(">"), "name": name}

    m = case.mailboxes()
    response = sendgrid.SendGridAPIClient(key, host=base_url).send(
        {
            "from": address(m["from"]),
            "personalizations": [{"to": [address(m["to"])], "cc": [address(m["cc"])]}],
            "reply_to": address(m["reply_to"]),
            "subject": case.subject,
            "content": [{"type": "text/plain", "value": "Body"}],
        }
    )
    return response.headers["X-Message-Id"]


STYLES: dict[str, Callable[[str, str, Case], str]] = {
    "native": native,
    "boto3": with_boto3,
    "postmark": with_postmark,
    "resend": with_resend,
    "sendgrid": with_sendgrid,
}
TEMPLATE_STYLES = {"native", "resend"}  # the others have no template variant


@dataclass
class Stack:
    base_url: str
    sink: SmtpSink


@pytest.fixture(scope="module")
def stack(django_db_setup, django_db_blocker) -> Iterator[Stack]:
    """One web server, worker and sink for the module; each test's rows are committed, so they see them."""
    with smtp_sink() as sink:
        settings = FAST_DISPATCH | {"EMAIL_URL": sink.url, "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}"}
        with web_server(workers=2, **settings) as base_url, celery_worker(**settings):
            yield Stack(base_url, sink)


@pytest.fixture
def key(transactional_db) -> str:
    domain = DomainFactory(name=DOMAIN)
    template = TemplateFactory(domain=domain, slug="greeting")
    TemplateVersionFactory(template=template, number=1, subject="Hello {{ name }}", text="Welcome.", html="")
    return ApiKeyFactory(domain=domain).secret


def header_names(data: bytes) -> list[bytes]:
    head = data.split(b"\r\n\r\n", 1)[0]
    return [line.split(b":", 1)[0] for line in head.split(b"\r\n") if line[:1] not in (b" ", b"\t")]


def assert_clean_on_the_wire(data: bytes) -> None:
    head = data.split(b"\r\n\r\n", 1)[0]
    names = header_names(data)
    assert set(names) <= ALLOWED, names
    assert len(names) == len(set(names)), names
    # No bare CR or LF, no NUL: some relays would end a header line there.
    assert b"\r" not in head.replace(b"\r\n", b"") and b"\n" not in head.replace(b"\r\n", b""), head
    assert b"\x00" not in data
    assert not re.search(rb"(?m)^(X-Injected|Bcc)", data), data
    parsed = email.message_from_bytes(data, policy=email.policy.default)
    assert (parsed["X-Injected"], parsed["Bcc"]) == (None, None)


@pytest.mark.parametrize("style", STYLES)
def test_no_header_field_of_any_send_style_can_add_a_header(style, stack, key):
    sent: dict[str, Case] = {}
    refused: list[Case] = []
    for case in CASES:
        if case.field == "template-variable" and style not in TEMPLATE_STYLES:
            continue
        try:
            sent[STYLES[style](stack.base_url, key, case)] = case
        except MailServiceError as refusal:
            assert refusal.status in (400, None) and refusal.code != "ConnectionError", refusal  # never a 500
            refused.append(case)

    assert sent, "every attempt was refused: nothing reached the wire to check"
    delivered = Message.objects.filter(public_id__in=sent, status=Status.DELIVERED)
    wait_until(lambda: delivered.count() == len(sent), timeout=60, interval=0.2, message=f"{len(sent)} deliveries")
    on_the_wire = {
        email.message_from_bytes(received.data, policy=email.policy.default)["Message-ID"]: received.data
        for received in stack.sink.received
    }
    for message_id, case in sent.items():
        data = on_the_wire[f"<{message_id}@{DOMAIN}>"]
        try:
            assert_clean_on_the_wire(data)
        except AssertionError as failure:
            raise AssertionError(f"{style} {case}: {failure}") from failure

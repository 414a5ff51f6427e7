"""Mail goes exactly where it was addressed: each recipient the API accepts reaches a real SMTP peer
(aiosmtpd on loopback, dispatch in-process) with RCPT TO equal to what was sent, quoted where the
local part needs it; an address with no faithful SMTP form is refused with a 400 naming the field;
no spelling of a suppressed address reaches the relay."""

import json
from collections.abc import Iterator

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP
from django.core.management import call_command

from domains.models import Domain
from messaging.models import Message, Status, SuppressionReason
from messaging.outbound.dispatch import dispatch_batch
from messaging.suppressions import suppression_add
from tests.api.wire import assert_api_error, inline_body
from tests.harness import SmtpSink, free_port

pytestmark = pytest.mark.django_db


class RecordingSMTP(SMTP):
    """Keeps each MAIL and RCPT argument exactly as it came over the wire."""

    async def smtp_MAIL(self, arg: str) -> None:  # noqa: N802 - aiosmtpd's command hook
        self.event_handler.raw.append(f"MAIL {arg}")
        await super().smtp_MAIL(arg)

    async def smtp_RCPT(self, arg: str) -> None:  # noqa: N802 - aiosmtpd's command hook
        self.event_handler.raw.append(f"RCPT {arg}")
        await super().smtp_RCPT(arg)


class RecordingController(Controller):
    def factory(self) -> SMTP:
        return RecordingSMTP(self.handler, **self.SMTP_kwargs)


class RecordingSink(SmtpSink):
    def __init__(self) -> None:
        super().__init__()
        self.raw: list[str] = []
        self.port = free_port()
        self.controller = RecordingController(self, hostname="127.0.0.1", port=self.port, enable_SMTPUTF8=True)

    def rcpt_lines(self) -> list[str]:
        return [line for line in self.raw if line.startswith("RCPT ")]


@pytest.fixture
def sink(settings) -> Iterator[RecordingSink]:
    sink = RecordingSink()
    sink.controller.start()
    settings.EMAIL_URL = sink.url
    try:
        yield sink
    finally:
        sink.controller.stop()


def _send(api, **body):
    return api.post("/v1/send", data=json.dumps(inline_body(**body)), content_type="application/json")


def _send_and_dispatch(api, to: str) -> Message:
    response = _send(api, to=to)
    assert response.status_code == 200, response.json()
    dispatch_batch(public_id=response.json()["id"])
    return Message.objects.get(public_id=response.json()["id"])


# (as sent to the API, RCPT TO argument on the wire)
DELIVERED = [
    ('"a:b"@rcpt.example', 'TO:<"a:b"@rcpt.example>'),
    ('"a(b)c"@rcpt.example', 'TO:<"a(b)c"@rcpt.example>'),
    ('"a\\\\b"@rcpt.example', 'TO:<"a\\\\b"@rcpt.example>'),
    ('"a\\"b"@rcpt.example', 'TO:<"a\\"b"@rcpt.example>'),
    ('"x:victim;"@rcpt.example', 'TO:<"x:victim;"@rcpt.example>'),
    ('"a[b]"@rcpt.example', 'TO:<"a[b]"@rcpt.example>'),
    ("Name <o'hara+tag@rcpt.example>", "TO:<o'hara+tag@rcpt.example>"),
    ('"plain"@rcpt.example', "TO:<plain@rcpt.example>"),  # the same mailbox: RFC 5321 4.1.2
    ("user@straße.example", "TO:<user@xn--strae-oqa.example>"),
    ("user@ς.example", "TO:<user@xn--3xa.example>"),
    ("user@Bücher.Example", "TO:<user@xn--bcher-kva.example>"),
    ("jörg@example.org", "TO:<jörg@example.org>"),
]


@pytest.mark.parametrize(("address", "rcpt"), DELIVERED)
def test_each_accepted_address_reaches_the_relay_as_sent(api, sink, address, rcpt):
    message = _send_and_dispatch(api, address)

    assert message.status == Status.DELIVERED, message.last_error
    assert sink.rcpt_lines() == [f"RCPT {rcpt}"]


REFUSED = [
    "a:b@rcpt.example",
    "a(b)c@rcpt.example",
    "a\\b@rcpt.example",
    'a"b@rcpt.example',
    "a;b@rcpt.example",
    "a[b]@rcpt.example",
    "x:victim;@rcpt.example",
    "a..b@rcpt.example",
    ".a@rcpt.example",
    '""@rcpt.example',
    "a\u00adb@rcpt.example",  # a soft hyphen in the local part: invisible
    "a\u200bb@rcpt.example",  # a zero-width space
    "a\u0301@rcpt.example",  # not NFC
    "bob@exa_mple.org",
    "bob@-example.org",
    "bob@xn--zz.example",  # not a valid A-label
    "bob@example.org.",  # the root's dot: not in an address (RFC 5321 4.1.2)
]


@pytest.mark.parametrize("address", REFUSED)
@pytest.mark.parametrize("field", ["to", "cc", "bcc", "replyTo"])
def test_an_address_without_a_faithful_smtp_form_is_refused_naming_the_field(api, address, field):
    error = assert_api_error(_send(api, **{field: address}), 400, "ValidationError")

    assert error["message"].startswith(f"{field}: "), error["message"]
    assert not Message.objects.exists()


BYPASS_SPELLINGS = [
    '"blocked"@example.org',
    "Blocked@Example.ORG",
    "blocked@ex\uff41mple.org",  # full-width a
    "blocked@exam\u00adple.org",  # soft hyphen (UTS 46 maps it to nothing)
    "\uff42locked@example.org",  # full-width b in the local part: counted as the suppressed address
]


@pytest.mark.parametrize("address", BYPASS_SPELLINGS)
def test_no_spelling_of_a_suppressed_address_reaches_the_relay(api, domain, sink, address):
    suppression_add(domain=domain, address="blocked@example.org", reason=SuppressionReason.MANUAL)

    message = _send_and_dispatch(api, address)

    assert message.status == Status.FAILED
    assert sink.raw == []


@pytest.mark.parametrize(
    "address",
    ["blo(comment)cked@example.org", "blo\u200bcked@example.org", "blocked@example\uff0eorg"],  # full-width full stop
)
def test_spellings_that_are_not_mailboxes_are_refused_before_the_suppression_list(api, domain, address):
    suppression_add(domain=domain, address="blocked@example.org", reason=SuppressionReason.MANUAL)

    assert_api_error(_send(api, to=address), 400, "ValidationError")


def test_a_unicode_sender_domain_matches_the_keys_domain(api, domain):
    Domain.objects.filter(pk=domain.pk).update(name="xn--strae-oqa.example")

    assert _send(api, **{"from": "Shop <shop@STRASSE.example>"}).status_code == 403
    assert _send(api, **{"from": "Shop <shop@straße.example>"}).status_code == 200


@pytest.mark.parametrize(
    "command",
    [
        ["create_domain", "{name}", "--verified"],
        ["verify_domain", "{name}"],
        ["create_api_key", "{name}", "--permission", "email.send"],
        ["set_allowance", "{name}", "100"],
        ["pause_sending", "--domain", "{name}"],
        ["resume_sending", "--domain", "{name}"],
        ["suppressions", "list", "{name}"],
        ["suppressions", "add", "{name}", "bob@example.org"],
        ["publish_template", "{name}", "welcome", "--subject", "Hi", "--text", "Hello"],
    ],
)
def test_every_operator_command_accepts_a_unicode_domain_name(command):
    if command[0] != "create_domain":
        call_command("create_domain", "straße.example")
    call_command(*[part.format(name="STRAẞE.example") for part in command])

    assert Domain.objects.get().name == "xn--strae-oqa.example"


@pytest.mark.parametrize(
    "sender",
    [
        '"ceo@victim.test" <hello@acme.example.com>',
        "ceo@victim.test <hello@acme.example.com>",
        "The CEO (ceo@VICTIM.test) <hello@acme.example.com>",
        "Acme support@acme.example.com via ceo@bücher.de <hello@acme.example.com>",
    ],
)
def test_a_display_name_showing_another_domains_address_is_refused_naming_the_field(api, sender):
    error = assert_api_error(
        api.post("/v1/send", inline_body(**{"from": sender}), format="json"), 400, "ValidationError"
    )
    assert error["message"].startswith("from: the display name shows an address in ")
    batch = {"messages": [inline_body(), inline_body(**{"from": sender})]}
    error = assert_api_error(api.post("/v1/send/batch", batch, format="json"), 400, "ValidationError")
    assert error["message"].startswith("messages.1.from: the display name shows an address in ")
    assert not Message.objects.exists()


@pytest.mark.parametrize(
    "sender", ["support@acme.example.com <hello@acme.example.com>", "Acme @home <hello@acme.example.com>"]
)
def test_a_display_name_showing_the_senders_own_domain_or_no_address_is_sent(api, sender):
    assert api.post("/v1/send", inline_body(**{"from": sender}), format="json").status_code == 200

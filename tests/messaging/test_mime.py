"""Building the RFC 5322 message: headers, bodies, and header injection being impossible."""

import email
import email.policy

import pytest
from django.utils import timezone

from messaging.mime import UnsendableMessage, envelope_for, render_message
from messaging.models import Message

INJECTIONS = [
    "Hi\r\nBcc: evil@attacker.example",
    "Hi\nX-Injected: yes",
    "Hi\rX-Injected: yes",
    "Hi\u2028X-Injected: yes",
    "Hi\u2029X-Injected: yes",
    "Hi\x85X-Injected: yes",
    "Hi\x0bX-Injected: yes\x0c",
    "Hi\x00X-Injected: yes",
    "Hi\r\n\r\nInjected body",
    "Hi=?utf-8?q?=0D=0AX-Injected:_yes?=",  # encoded-words: the email package would decode them
    "=?utf-8?b?DQpYLUluamVjdGVkOiB5ZXM=?=",
]
EXPECTED_HEADERS = {"from", "to", "cc", "reply-to", "subject", "date", "message-id", "mime-version", "content-type"}
EXPECTED_HEADERS |= {"content-transfer-encoding"}


def build(**fields) -> Message:
    values = {
        "public_id": "msg_test123",
        "from_address": "Shop <shop@acme.example.com>",
        "to": ["bob@example.org"],
        "cc": [],
        "bcc": [],
        "reply_to": [],
        "subject": "Hello",
        "text": "Plain body",
        "html": None,
        "created_at": timezone.now(),
    } | fields
    return Message(**values)


def header_names(data: bytes) -> list[str]:
    head = data.split(b"\r\n\r\n", 1)[0].decode()
    return [line.split(":", 1)[0].lower() for line in head.split("\r\n") if not line[:1].isspace()]


def parse(data: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(data, policy=email.policy.default)


def test_text_and_html_become_multipart_alternative_with_utf8_parts():
    parsed = parse(render_message(build(text="Grüße", html="<p>Grüße</p>")).data)

    assert parsed.get_content_type() == "multipart/alternative"
    assert [part.get_content_type() for part in parsed.iter_parts()] == ["text/plain", "text/html"]
    assert [part.get_content_charset() for part in parsed.iter_parts()] == ["utf-8", "utf-8"]
    assert parsed.get_body(("plain",)).get_content().strip() == "Grüße"
    assert parsed.get_body(("html",)).get_content().strip() == "<p>Grüße</p>"


@pytest.mark.parametrize(
    ("text", "html", "content_type"), [("Hi", None, "text/plain"), (None, "<p>Hi</p>", "text/html")]
)
def test_a_single_body_is_a_single_part(text, html, content_type):
    assert parse(render_message(build(text=text, html=html)).data).get_content_type() == content_type


def test_headers_carry_the_addresses_message_id_and_date_but_never_bcc():
    message = build(
        to=["Bob <bob@example.org>", "carol@example.org"],
        cc=["Dan, the Boss <dan@example.org>"],
        bcc=["hidden@example.net"],
        reply_to=["help@acme.example.com"],
    )
    rendered = render_message(message)
    parsed = parse(rendered.data)

    assert parsed["From"] == "Shop <shop@acme.example.com>"
    assert parsed["To"] == "Bob <bob@example.org>, carol@example.org"
    assert parsed["Cc"] == '"Dan, the Boss" <dan@example.org>'
    assert parsed["Reply-To"] == "help@acme.example.com"
    assert parsed["Message-ID"] == rendered.message_id == "<msg_test123@acme.example.com>"
    assert parsed["Date"].datetime == message.created_at.replace(microsecond=0)
    assert b"hidden@example.net" not in rendered.data
    assert "bcc" not in header_names(rendered.data)


def test_a_non_ascii_subject_is_rfc2047_encoded_and_lines_stay_short():
    rendered = render_message(build(subject="Ünïcödé " * 40))

    assert rendered.data.isascii()
    assert b"=?utf-8?" in rendered.data
    assert parse(rendered.data)["Subject"] == "Ünïcödé " * 40
    assert max(len(line) for line in rendered.data.split(b"\r\n")) <= 78


@pytest.mark.parametrize("subject", ["Price =?utf-8?q?=E2=82=AC?= 5", "Ünï =?x?q?y?= " * 12])
def test_a_subject_holding_encoded_word_syntax_is_sent_encoded_and_reads_back_literally(subject):
    rendered = render_message(build(subject=subject))

    assert parse(rendered.data)["Subject"] == subject
    assert max(len(line) for line in rendered.data.split(b"\r\n")) <= 78


@pytest.mark.parametrize("payload", INJECTIONS)
def test_a_subject_cannot_add_headers_or_end_the_header_block(payload):
    rendered = render_message(build(subject=payload))
    parsed = parse(rendered.data)

    assert set(header_names(rendered.data)) <= EXPECTED_HEADERS
    assert parsed["Bcc"] is None and parsed["X-Injected"] is None
    assert parsed.get_content().strip() == "Plain body"
    assert "\n" not in parsed["Subject"] and "\r" not in parsed["Subject"]


@pytest.mark.parametrize("payload", [p for p in INJECTIONS if not {"\r", "\n", "\x00"} & set(p)])
@pytest.mark.parametrize("field", ["from_address", "to", "cc", "reply_to"])
def test_a_display_name_cannot_add_headers(field, payload):
    # The Mailbox grammar already refuses CR, LF and NUL in display text; every other separator is folded here.
    domain = "acme.example.com" if field == "from_address" else "example.org"
    mailbox = f"{payload} <someone@{domain}>"
    rendered = render_message(build(**{field: mailbox if field == "from_address" else [mailbox]}))
    parsed = parse(rendered.data)

    assert set(header_names(rendered.data)) <= EXPECTED_HEADERS
    assert parsed["X-Injected"] is None
    assert parsed.get_content().strip() == "Plain body"


@pytest.mark.parametrize(
    "address",
    ["bob\x00@example.org", "bob\x7f@example.org", "bo\x1bb@example.org", "Hi\x00X-Injected: yes <b@example.org>"],
)
def test_a_control_character_in_an_address_makes_the_message_unsendable(address):
    with pytest.raises(UnsendableMessage, match="control character"):
        render_message(build(to=[address]))


def test_international_addresses_use_idna_domains_and_smtputf8_only_for_non_ascii_local_parts():
    idna_only = render_message(build(to=["bob@bücher.example"]))
    utf8_local = build(to=["jürgen@example.org"])

    assert b"bob@xn--bcher-kva.example" in idna_only.data and not idna_only.smtputf8
    assert render_message(utf8_local).smtputf8
    assert envelope_for(message=utf8_local, recipients=["jürgen@example.org"], return_path_domain=None).smtputf8


@pytest.mark.parametrize(
    ("return_path_domain", "mail_from"),
    [(None, "shop@acme.example.com"), ("bounces.example.net", "bounces+msg_test123@bounces.example.net")],
)
def test_the_envelope_sender_is_the_verp_return_path_when_configured(return_path_domain, mail_from):
    envelope = envelope_for(message=build(), recipients=["bob@example.org"], return_path_domain=return_path_domain)
    assert envelope.mail_from == mail_from

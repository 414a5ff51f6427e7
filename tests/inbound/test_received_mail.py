"""Received mail is stored with whatever can be decoded, however broken it arrives; relaying is impossible."""

import pytest
from django.test import override_settings

from messaging.inbound.routing import RouteKind, recipient_route
from messaging.inbound.services import inbound_deliver
from messaging.models import Direction, EventType, Message, Status
from messaging.rfc5322.parsing import html_to_text, parse_received
from tests.factories import DomainFactory
from tests.inbound.mail import RETURN_PATH_DOMAIN

MULTIPART = (
    b"From: Shop <shop@example.org>\r\nTo: help@acme.example.com\r\nSubject: Order\r\nMIME-Version: 1.0\r\n"
    b'Content-Type: multipart/alternative; boundary="b"\r\n\r\n'
    b"--b\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<p>html</p>\r\n"
    b"--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nplain wins\r\n--b--\r\n"
)
HTML_ONLY = (
    b"From: a@example.org\r\nSubject: Html\r\nContent-Type: text/html; charset=utf-8\r\n\r\n"
    b"<html><head><title>T</title><style>p{}</style></head><body><h1>Hi&nbsp;there</h1>"
    b"<p>Line one<br>Line two &amp; more</p><script>x()</script></body></html>"
)
ATTACHMENT_ONLY = (
    b"From: a@example.org\r\nSubject: Scan\r\nMIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=z\r\n\r\n"
    b"--z\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n\r\nJVBERi0=\r\n--z--\r\n"
)
EIGHT_BIT_HEADERS = "From: Zoë <zoe@example.org>\r\nSubject: Café ☕\r\n\r\nçà va\r\n".encode()
LATIN1_DECLARED_UTF8 = (
    b"From: a@example.org\r\nSubject: x\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nd\xe9j\xe0 vu\r\n"
)
UNKNOWN_CHARSET = (
    b"From: a@example.org\r\nSubject: =?x-bogus?Q?caf=E9?=\r\n"
    b"Content-Type: text/plain; charset=x-bogus\r\n\r\nna\xefve\r\n"
)
ENCODED_WORDS = b"From: =?iso-8859-1?Q?Andr=E9?= <andre@example.org>\r\nSubject: =?utf-8?B?w6lsw6h2ZQ==?=\r\n\r\nok\r\n"
TRUNCATED = (
    b'From: a@example.org\r\nSubject: cut\r\nContent-Type: multipart/mixed; boundary="q"\r\n\r\n'
    b"--q\r\nContent-Type: text/plain\r\n\r\npart"
)
NUL_BYTES = b"From: a@example.org\r\nSubject: nul\x00here\r\n\r\nbody\x00with nul\r\n"
NOT_MIME = b"\xff\xfe\x00garbage without any headers at all"


@pytest.mark.parametrize(
    ("raw", "from_address", "subject", "text"),
    [
        (MULTIPART, "Shop <shop@example.org>", "Order", "plain wins"),
        (HTML_ONLY, "a@example.org", "Html", "Hi there\n\nLine one\nLine two & more"),
        (ATTACHMENT_ONLY, "a@example.org", "Scan", None),
        (EIGHT_BIT_HEADERS, "Zoë <zoe@example.org>", "Café ☕", "çà va\r\n"),
        (LATIN1_DECLARED_UTF8, "a@example.org", "x", "déjà vu\r\n"),
        (UNKNOWN_CHARSET, "a@example.org", "café", "naïve\r\n"),
        (ENCODED_WORDS, "André <andre@example.org>", "élève", "ok\r\n"),
        (TRUNCATED, "a@example.org", "cut", "part"),
        (NUL_BYTES, "a@example.org", "nulhere", "bodywith nul\r\n"),
        (NOT_MIME, "", "", "ÿþgarbage without any headers at all"),
    ],
    ids=[
        "multipart",
        "html-only",
        "no-text",
        "8bit-headers",
        "wrong-charset",
        "unknown-charset",
        "rfc2047",
        "truncated",
        "nul",
        "not-mime",
    ],
)
def test_decoding(raw, from_address, subject, text):
    parsed = parse_received(raw)
    assert (parsed.from_address, parsed.subject, parsed.text) == (from_address, subject, text)


def test_html_to_text_drops_markup_scripts_and_styles():
    assert html_to_text("<style>a{}</style><ul><li>one</li><li>two</li></ul>") == "one\n\ntwo"


@override_settings(MAILSERVICE_RETURN_PATH_DOMAIN=RETURN_PATH_DOMAIN)
@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("help@acme.example.com", RouteKind.RECEIVED),
        ("Help@ACME.example.com.", RouteKind.RECEIVED),
        (f"bounces+msg_abc@{RETURN_PATH_DOMAIN}", RouteKind.REPORT),
        (f"fbl@{RETURN_PATH_DOMAIN}", RouteKind.REPORT),
        ("someone@unverified.example.com", RouteKind.REFUSED),
        ("someone@elsewhere.example", RouteKind.REFUSED),
        ("no-at-sign", RouteKind.REFUSED),
    ],
)
def test_recipient_routes(domain, address, kind):
    DomainFactory(name="unverified.example.com", verified=False)
    assert recipient_route(address=address).kind == kind


@pytest.mark.usefixtures("sql_path")
def test_one_message_per_recipient_domain_each_listing_only_its_own_recipients(domain):
    other = DomainFactory(name="other.example.net")
    recipients = ["a@acme.example.com", "b@acme.example.com", "c@other.example.net"]

    inbound_deliver(envelope_from="sender@example.org", recipients=recipients, raw=MULTIPART)

    stored = {m.domain: m for m in Message.objects.filter(direction=Direction.RECEIVED)}
    assert stored[domain].to == ["a@acme.example.com", "b@acme.example.com"]
    assert stored[other].to == ["c@other.example.net"]
    for message in stored.values():
        assert (message.status, message.envelope_from, bytes(message.raw)) == (
            Status.RECEIVED,
            "sender@example.org",
            MULTIPART,
        )
        assert list(message.events.values_list("type", flat=True)) == [EventType.RECEIVED]


@pytest.mark.usefixtures("sql_path")
def test_mail_is_stored_only_for_domains_verified_when_it_is_stored(domain):
    DomainFactory(name="unverified.example.com", verified=False)
    recipients = ["a@acme.example.com", "b@unverified.example.com", "c@elsewhere.example"]

    refused = inbound_deliver(envelope_from="sender@example.org", recipients=recipients, raw=MULTIPART)

    assert refused == ["b@unverified.example.com", "c@elsewhere.example"]
    assert [(m.domain, m.to) for m in Message.objects.all()] == [(domain, ["a@acme.example.com"])]


@pytest.mark.usefixtures("sql_path")
def test_received_mail_has_the_model_defaults_in_every_column_it_does_not_set(domain):
    inbound_deliver(envelope_from="sender@example.org", recipients=["a@acme.example.com"], raw=MULTIPART)

    stored = Message.objects.get()
    assert (stored.from_address, stored.subject, stored.text, stored.message_id_header) == (
        "Shop <shop@example.org>",
        "Order",
        "plain wins",
        "",
    )
    assert stored.created_at is not None and stored.updated_at is not None
    assert stored.public_id.startswith("msg_")
    set_here = {"id", "public_id", "domain", "direction", "status", "from_address", "to", "subject", "text"}
    set_here |= {"message_id_header", "envelope_from", "raw", "created_at", "updated_at"}
    for field in Message._meta.concrete_fields:
        if field.name not in set_here:
            assert getattr(stored, field.attname) == field.get_default(), field.name
    event = stored.events.get()
    assert (event.type, event.recipient, event.detail) == (EventType.RECEIVED, "", "envelope from <sender@example.org>")

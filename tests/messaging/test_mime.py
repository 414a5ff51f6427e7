"""Building the RFC 5322 message: headers, bodies, and header injection being impossible."""

import email
import email.policy
from email.headerregistry import Address

import pytest
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from mailservice.mailbox import parse_address, split_mailbox
from messaging.models import Message
from messaging.outbound.envelope import envelope_for
from messaging.rfc5322 import rendering
from messaging.rfc5322.rendering import UnsendableMessage, _display_name, parsed_address, render_message, single_line

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
    with pytest.raises(UnsendableMessage, match="cannot be sent as written"):
        render_message(build(to=[address]))


def test_an_address_is_parsed_once_however_often_a_message_needs_it_and_a_long_one_is_never_kept():
    rendering._parsed_address_cached.cache_clear()
    ordinary = "Bob <bob@example.org>"
    long_mailbox = f'"{"x" * 600}" <bob@example.org>'

    assert parsed_address(ordinary) is parsed_address(ordinary)
    assert parsed_address(long_mailbox) == parsed_address(ordinary)
    assert rendering._parsed_address_cached.cache_info().currsize == 1
    for _ in range(2):  # an unsendable one is refused every time, never remembered
        with pytest.raises(UnsendableMessage):
            parsed_address("bob@ex(ample.org")
    assert rendering._parsed_address_cached.cache_info().currsize == 1


def test_international_addresses_use_idna_domains_and_smtputf8_only_for_non_ascii_local_parts():
    idna_only = render_message(build(to=["bob@bücher.example"]))
    utf8_local = build(to=["jürgen@example.org"])

    assert b"bob@xn--bcher-kva.example" in idna_only.data and not idna_only.smtputf8
    assert render_message(utf8_local).smtputf8
    assert envelope_for(message=utf8_local, recipients=["jürgen@example.org"], return_path_domain=None).smtputf8


@pytest.mark.parametrize(
    ("return_path_domain", "mail_from"),
    # the tag: an HMAC of the id under the test SECRET_KEY (messaging.verp)
    [(None, "shop@acme.example.com"), ("bounces.example.net", "bounces+msg_test123.5e48c4845a@bounces.example.net")],
)
def test_the_envelope_sender_is_the_verp_return_path_when_configured(return_path_domain, mail_from):
    envelope = envelope_for(message=build(), recipients=["bob@example.org"], return_path_domain=return_path_domain)
    assert envelope.mail_from == mail_from


def test_an_address_whose_domain_is_not_a_host_name_makes_the_message_unsendable():
    with pytest.raises(UnsendableMessage, match="not a valid domain name"):
        render_message(build(to=["bob@ex(ample.org"]))


def test_a_quoted_local_part_that_is_not_a_dot_atom_stays_quoted():
    rendered = render_message(build(to=['Jo "Q" B <"a\\"b..c"@example.org>']))

    assert b'To: "Jo \\"Q\\" B" <"a\\"b..c"@example.org>' in rendered.data
    [address] = parse(rendered.data)["To"].addresses
    assert (address.display_name, address.username) == ('Jo "Q" B', 'a"b..c')


def test_long_address_lists_and_subjects_are_folded_between_items_and_words():
    to = [f"Customer number {n} <customer{n}@example.org>" for n in range(50)]
    rendered = render_message(build(to=to, subject="word " * 100))
    parsed = parse(rendered.data)

    assert max(len(line) for line in rendered.data.split(b"\r\n")) <= 78
    assert [str(address) for address in parsed["To"].addresses] == to
    assert parsed["Subject"] == "word " * 100


_DISPLAY = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="<>\r\n\x00"), max_size=40)
# A local part the API accepts: a dot-atom, or a quoted-string of printable ASCII (quoted-pairs for \\ and ").
_ATOM_TEXT = st.text(st.sampled_from("abcXYZ019!#$%&'*+/=?^_`{|}~-"), min_size=1, max_size=8)
_LOCAL = st.lists(_ATOM_TEXT, min_size=1, max_size=3).map(".".join) | st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters="<>@,"), min_size=1, max_size=20
).map(lambda text: '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"')
_LABEL = st.text(st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789-äßü"), min_size=1, max_size=12).filter(
    lambda label: not label.startswith("-") and not label.endswith("-") and "--" not in label
)
_MAILBOX = st.builds(
    lambda display, local, labels: (
        f"{display} <{local}@{'.'.join(labels)}>" if display.strip() else f"{local}@{'.'.join(labels)}"
    ),
    _DISPLAY,
    _LOCAL,
    st.lists(_LABEL, min_size=2, max_size=3),
)
_BODY = st.none() | st.text(st.characters(exclude_categories=("Cs",)), max_size=300)


def _read_address(address: Address, *, mailbox: str) -> tuple[str, str, str]:
    """(display, local part, domain) as read back. Python's address parser keeps the space at the
    fold between two encoded-words of one display name (RFC 2047 6.2 says to drop it), so those
    spaces are dropped here; a display name that fits one encoded-word is compared exactly."""
    display = address.display_name
    if "\r\n" in _display_name(split_mailbox(mailbox)[0]):
        display = display.replace(" ", "")
    return display, address.username, address.domain


def _expected_address(mailbox: str) -> tuple[str, str, str]:
    display = " ".join(single_line(split_mailbox(mailbox)[0]).split())
    if "\r\n" in _display_name(display):
        display = display.replace(" ", "")
    address = parse_address(mailbox)
    return display, address.local, address.domain


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").rstrip("\n")


@settings(max_examples=300, deadline=None)
@given(
    sender=_MAILBOX,
    to=st.lists(_MAILBOX, min_size=1, max_size=4),
    cc=st.lists(_MAILBOX, max_size=3),
    subject=st.text(st.characters(exclude_categories=("Cs",)), max_size=120),
    text=_BODY,
    html=_BODY,
)
def test_a_rendered_message_reads_back_as_stored(sender, to, cc, subject, text, html):
    """Any sendable message, parsed back by the standard library: exactly its headers, each value
    as stored (display text on one line), and its bodies."""
    rendered = render_message(build(from_address=sender, to=to, cc=cc, subject=subject, text=text, html=html))
    parsed = parse(rendered.data)

    expected = {"from", "to", "subject", "date", "message-id", "mime-version", "content-type"} | (
        {"cc"} if cc else set()
    )
    assert set(header_names(rendered.data)) - {"content-transfer-encoding"} == expected
    assert len(header_names(rendered.data)) == len(set(header_names(rendered.data)))
    assert max(len(line) for line in rendered.data.split(b"\r\n")) <= 998
    for field, mailboxes in (("From", [sender]), ("To", to), ("Cc", cc)):
        read = (
            [_read_address(a, mailbox=m) for a, m in zip(parsed[field].addresses, mailboxes, strict=True)]
            if mailboxes
            else []
        )
        assert read == [_expected_address(mailbox) for mailbox in mailboxes]
    assert parsed["Subject"].strip() == single_line(subject).strip()
    bodies = {"plain": text if text is not None or html is None else None, "html": html}
    for subtype, body in bodies.items():
        if body is not None:
            assert _lines(parsed.get_body((subtype,)).get_content()) == _lines(body)

"""The submitted message's header block: read in one bounded pass, rewritten only where dispatch must."""

import contextlib
import time
from datetime import UTC, datetime

import pytest

from messaging.rfc5322.submitted import MAX_HEADER_BYTES, SubmissionMalformed, submitted_wire
from messaging.rfc5322.submitted_headers import parse_submitted, refuse_bare_line_breaks

BODY = b"Hello,\r\n\r\n.see the attachment\r\n"


def test_the_listed_fields_come_from_the_header():
    raw = (
        b'From: "Acme, Billing" <billing@acme.example.com>\r\n'
        b"To: Bob <bob@example.org>, carol@example.org (Carol), undisclosed-recipients:;\r\n"
        b"Cc: =?utf-8?b?SsO8cmdlbg==?= <jurgen@example.de>\r\n"
        b"Subject: =?utf-8?q?Rechnung_f=C3=BCr?=\r\n  November\r\n"
        b"Message-ID: <abc@acme.example.com>\r\n\r\n" + BODY
    )
    parsed = parse_submitted(raw)
    assert parsed.from_address == "Acme, Billing <billing@acme.example.com>"
    assert parsed.to == ["Bob <bob@example.org>", "carol@example.org"]
    assert parsed.cc == ["Jürgen <jurgen@example.de>"]
    assert parsed.subject == "Rechnung für November"
    assert parsed.message_id == "<abc@acme.example.com>"
    assert not parsed.has_date


def test_the_wire_form_drops_bcc_and_adds_message_id_and_date_and_keeps_the_rest_byte_for_byte():
    head = b"From: a@acme.example.com\r\nBcc: secret@example.net,\r\n\tother@example.net\r\nTo: b@example.org\r\n"
    wire = submitted_wire(
        head + b"\r\n" + BODY, message_id="<x@acme.example.com>", date=datetime(2026, 1, 2, tzinfo=UTC)
    )
    assert wire == (
        b"From: a@acme.example.com\r\nTo: b@example.org\r\nMessage-ID: <x@acme.example.com>\r\n"
        b"Date: Fri, 02 Jan 2026 00:00:00 +0000\r\n\r\n" + BODY
    )


def test_a_message_id_and_date_already_there_are_kept():
    raw = b"From: a@acme.example.com\r\nDate: Thu, 1 Jan 2026 10:00:00 +0100\r\nMessage-ID: <own@x>\r\n\r\n" + BODY
    assert submitted_wire(raw, message_id="<other@x>", date=datetime.now(UTC)) == raw


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        (b"To: b@example.org\r\n\r\nno sender", "exactly one From"),
        (b"From: a@x.example\r\nFrom: b@x.example\r\n\r\n", "exactly one From"),
        (b"From: a@x.example, b@x.example\r\n\r\n", "exactly one address"),
        (b"From: not an address\r\n\r\n", "is not an email address"),
        (b"From: a@x.example\r\nTo: <b@example.org\r\n\r\n", "unclosed"),
        (b" folded first\r\nFrom: a@x.example\r\n\r\n", "continuation"),
        (b"From: a@x.example\r\nno colon here\r\n\r\n", "header line 2"),
        (b"From: a@x.example\r\nX-\x00: y\r\n\r\n", "header line 2"),
        (b"From: a@x.example\r\n" + b"X: y\r\n" * 600 + b"\r\n", "more than 500 header fields"),
        (b"From: a@x.example\r\nX: " + b"y" * MAX_HEADER_BYTES + b"\r\n\r\n", "longer than"),
    ],
)
def test_a_header_that_cannot_be_read_is_refused_with_the_reason(raw, complaint):
    with pytest.raises(SubmissionMalformed, match=complaint):
        parse_submitted(raw)


HOSTILE = {
    "encoded-word starts": b"Subject: " + b"=?a?q?" * (MAX_HEADER_BYTES // 7),
    "nested comments": b"To: " + b"(" * (MAX_HEADER_BYTES - 100),
    "quotes and escapes": b"To: " + b'"\\' * (MAX_HEADER_BYTES // 2 - 100),
    "angle brackets": b"To: " + b"<a@b.example>," * (MAX_HEADER_BYTES // 15),
    "continuation lines": b"X: y\r\n" + b" a\r\n" * (MAX_HEADER_BYTES // 5),
    "display names": b"To: " + b"x " * (MAX_HEADER_BYTES // 2 - 100) + b"<a@b.example>",
}


@pytest.mark.parametrize("hostile", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_headers_of_the_largest_accepted_size_are_read_in_linear_time(hostile):
    raw = b"From: a@acme.example.com\r\n" + hostile + b"\r\n\r\nbody\r\n"
    started = time.perf_counter()
    with contextlib.suppress(SubmissionMalformed):
        parse_submitted(raw[: MAX_HEADER_BYTES + 1000])
    assert time.perf_counter() - started < 2.0  # well under a second on an idle core; quadratic would be minutes


def test_a_bare_cr_or_lf_stored_before_it_was_refused_goes_out_as_crlf():
    raw = b"From: a@acme.example.com\r\nSubject: x\rFrom: ceo@victim.test\r\n\r\nhello\r.\rMAIL FROM:<x@y>\n.\n"

    data = submitted_wire(raw, message_id="<x@acme.example.com>", date=datetime(2026, 1, 2, tzinfo=UTC))

    assert data.replace(b"\r\n", b"").count(b"\r") == data.replace(b"\r\n", b"").count(b"\n") == 0
    assert b"\r\nFrom: ceo@victim.test\r\n" in data and b"\r\n.\r\nMAIL FROM:<x@y>\r\n.\r\n" in data


@pytest.mark.parametrize("line_break", [b"\r", b"\n"], ids=["CR", "LF"])
def test_the_bare_line_break_check_is_linear_on_the_largest_message(line_break):
    raw = b"x\r\n" * (10 * 1024 * 1024 // 3) + line_break
    started = time.perf_counter()
    with pytest.raises(SubmissionMalformed, match=f"line {10 * 1024 * 1024 // 3 + 1} holds a bare"):
        refuse_bare_line_breaks(raw)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize(
    ("raw", "complaint"),
    [
        (b"a\r\nb\r\r\n", "line 2 holds a bare CR"),
        (b"a\r\n\n\r\n", "line 2 holds a bare LF"),
        (b"a\r\nb\r\nc\r", "line 3 holds a bare CR"),
        (b"\na\r\n", "line 1 holds a bare LF"),
        (b"a\r\n\r\r\n\n", "line 2 holds a bare CR"),
    ],
)
def test_the_first_bare_cr_or_lf_is_named(raw, complaint):
    with pytest.raises(SubmissionMalformed, match=complaint):
        refuse_bare_line_breaks(raw)


def test_crlf_line_endings_alone_pass():
    refuse_bare_line_breaks(b"From: a@acme.example.com\r\n\r\n\r\n.\r\nbody\r\n")

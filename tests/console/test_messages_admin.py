"""Messages in the console: read-only, searchable, filterable, cheap to list, with a full detail page."""

import html as html_lib
import re

import pytest
from django.db import connection

from mailservice.console import EstimatedCountPaginator
from messaging.models import Direction, EventType, Message, MessageEvent, Status
from messaging.verp import verp_local_part
from tests.factories import DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db

LIST = "/admin/messaging/message/"


def listed_ids(response) -> set[str]:
    page = response.content.decode()
    return {message.public_id for message in Message.objects.all() if message.public_id in page}


def test_the_list_costs_the_same_queries_for_5_or_60_messages_and_never_counts_the_table(
    operator, domain, django_assert_num_queries
):
    MessageFactory.create_batch(5, domain=domain)
    # session, user, bounded count, page, domains for the filter
    with django_assert_num_queries(5):
        assert operator.get(LIST).status_code == 200
    MessageFactory.create_batch(55, domain=DomainFactory())
    with django_assert_num_queries(5) as many:
        operator.get(LIST)

    counts = [query["sql"] for query in many.captured_queries if "COUNT(" in query["sql"]]
    assert len(counts) == 1 and "LIMIT 10001" in counts[0]  # bounded, never the whole table
    page_query = next(q["sql"] for q in many.captured_queries if "LIMIT 50" in q["sql"])
    assert 'ORDER BY "messaging_message"."id" DESC' in page_query  # a primary key index scan, no sort
    assert '"raw"' not in page_query and '"html"' not in page_query  # bodies stay on disk for the list


def test_large_tables_are_estimated_from_postgres_statistics(domain, monkeypatch):
    if connection.vendor != "postgresql":
        pytest.skip("the estimate reads PostgreSQL's catalog")
    MessageFactory.create_batch(30, domain=domain)
    MessageFactory.create_batch(10, domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE messaging_message")
    monkeypatch.setattr(EstimatedCountPaginator, "EXACT_LIMIT", 5)

    everything = EstimatedCountPaginator(Message.objects.order_by("-created_at"), 10)
    received = EstimatedCountPaginator(Message.objects.filter(direction=Direction.RECEIVED).order_by("-id"), 10)

    assert everything.count == 40  # pg_class.reltuples after ANALYZE
    assert 6 <= received.count <= 40  # the planner's estimate, never below what was seen
    small = EstimatedCountPaginator(Message.objects.filter(direction=Direction.RECEIVED).order_by("-id"), 10)
    monkeypatch.setattr(EstimatedCountPaginator, "EXACT_LIMIT", 100)
    assert small.count == 10  # exact below the limit


def test_search_by_public_id_from_to_and_subject(operator, domain):
    target = MessageFactory(domain=domain, to=["carol@example.org"], subject="Invoice 2026-11")
    other = MessageFactory(domain=domain, to=["dave@example.org"], subject="Newsletter")

    for term in (target.public_id, "carol@", "invoice", f"sender@{domain.name}"):
        found = listed_ids(operator.get(LIST, {"q": term}))
        assert target.public_id in found, term
        if term != f"sender@{domain.name}":
            assert other.public_id not in found, term


def test_the_list_marks_a_test_keys_messages(operator, domain):
    MessageFactory(domain=domain, is_test=True, status=Status.DELIVERED, subject="from a test key")
    MessageFactory(domain=domain, status=Status.DELIVERED, subject="from a live key")

    page = operator.get(LIST).content.decode()

    rows = [row for row in re.findall(r"<tr>.*?</tr>", page, re.S) if " key</td>" in row or "from a " in row]
    assert len(rows) == 2
    assert all(("· test" in row) == ("from a test key" in row) for row in rows)


def test_filters_by_direction_status_domain_and_date(operator, domain):
    sent = MessageFactory(domain=domain, status=Status.BOUNCED)
    received = MessageFactory(domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED)
    elsewhere = MessageFactory(domain=DomainFactory())

    assert listed_ids(operator.get(LIST, {"direction__exact": "received"})) == {received.public_id}
    assert listed_ids(operator.get(LIST, {"status__exact": "bounced"})) == {sent.public_id}
    assert elsewhere.public_id not in listed_ids(operator.get(LIST, {"domain__id__exact": domain.pk}))
    today = sent.created_at.date()
    assert len(listed_ids(operator.get(LIST, {"created_at__gte": f"{today} 00:00:00+00:00"}))) == 3


def test_a_domains_messages_filter_by_refusal_reason(operator, domain):
    blocked, unknown, other_domain = (MessageFactory(domain=d) for d in (domain, domain, DomainFactory()))
    for message, reason in ((blocked, "blocked"), (unknown, "user_unknown"), (other_domain, "blocked")):
        MessageEvent.objects.create(message=message, type=EventType.BOUNCED, recipient="a@example.org", reason=reason)

    by_domain = {"domain__id__exact": domain.pk}
    assert listed_ids(operator.get(LIST, {**by_domain, "reason": "blocked"})) == {blocked.public_id}
    assert listed_ids(operator.get(LIST, {**by_domain, "reason": "user_unknown"})) == {unknown.public_id}
    assert listed_ids(operator.get(LIST, {"reason": "blocked"})) == {blocked.public_id, other_domain.public_id}
    assert 'href="?reason=spam_detected"' in operator.get(LIST).content.decode()  # every reason is offered


def test_the_detail_page_shows_the_timeline_text_and_sandboxed_html(operator, domain):
    message = MessageFactory(domain=domain, text="Plain <body>", html="<script>alert(1)</script><p>Hi</p>")
    MessageEvent.objects.create(message=message, type=EventType.ACCEPTED)
    MessageEvent.objects.create(
        message=message, type=EventType.DEFERRED, recipient="rcpt@example.org", detail="451 try later"
    )
    MessageEvent.objects.create(
        message=message, type=EventType.DELIVERED, recipient="rcpt@example.org", detail="250 ok"
    )

    page = operator.get(f"{LIST}{message.pk}/change/").content.decode()

    timeline = page[page.index('<table id="timeline"') :]
    assert timeline.index("Accepted") < timeline.index("451 try later")
    assert timeline.index("451 try later") < timeline.index("250 ok")
    assert "Plain &lt;body&gt;" in page
    assert '<iframe class="ms-html" sandbox=""' in page
    assert "<script>alert(1)</script>" not in page  # only inside the escaped srcdoc
    assert html_lib.escape("<script>alert(1)</script>") in page
    # Labels in words, not an identifier a rename left behind.
    assert "Outcome per recipient" in page and "<th>Outcome</th>" in page and "ReportedOutcome" not in page


def test_the_detail_page_shows_the_raw_source_of_received_mail(operator, domain):
    raw = b"From: a@example.org\r\nSubject: hello\r\n\r\nBody \xff<tag>\r\n"
    message = MessageFactory(domain=domain, direction=Direction.RECEIVED, status=Status.RECEIVED, raw=raw)

    page = operator.get(f"{LIST}{message.pk}/change/").content.decode()

    assert '<pre id="message-raw"' in page and "Subject: hello" in page and "Body \ufffd&lt;tag&gt;" in page


def test_messages_are_read_only_even_for_superusers(operator, domain):
    message = MessageFactory(domain=domain)

    assert operator.get(f"{LIST}add/").status_code == 403
    assert operator.post(f"{LIST}{message.pk}/delete/", {"post": "yes"}).status_code == 403
    assert b'name="_save"' not in operator.get(f"{LIST}{message.pk}/change/").content
    assert Message.objects.filter(pk=message.pk).exists()


@pytest.mark.parametrize(
    ("return_path_domain", "expected"),
    [
        (
            "bounces.example.net",
            "{verp}@bounces.example.net (VERP return path of the first recipient; each has its own)",
        ),
        (None, "hello@{domain}"),
    ],
)
def test_a_sent_message_shows_the_envelope_sender_it_goes_out_with(
    operator, domain, settings, return_path_domain, expected
):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = return_path_domain
    message = MessageFactory(domain=domain, from_address=f"Shop <hello@{domain.name}>")

    html = operator.get(f"{LIST}{message.pk}/change/").content.decode()

    assert expected.format(verp=verp_local_part(message.public_id, 0), domain=domain.name) in html


def test_the_timeline_shows_each_events_reply_code_status_bounce_type_and_relay(operator, domain):
    message = MessageFactory(domain=domain)
    MessageEvent.objects.create(
        message=message,
        type=EventType.RECIPIENT_REJECTED,
        recipient="rcpt@example.org",
        detail="452 4.2.2 mailbox full",
        smtp_code=452,
        enhanced_status="4.2.2",
        diagnostic="4.2.2 mailbox full",
        bounce_type="soft",
        remote_host="relay.example.net",
    )

    page = operator.get(f"{LIST}{message.pk}/change/").content.decode()

    timeline = page[page.index('<table id="timeline"') :]
    assert "<td>452 4.2.2 (soft)</td><td>relay.example.net</td><td>452 4.2.2 mailbox full</td>" in timeline

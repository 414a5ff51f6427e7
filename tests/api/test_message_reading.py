"""GET /v1/messages and /v1/messages/{id}: order, paging, filters, cursors and the domain boundary."""

from datetime import timedelta

import pytest
from django.utils import timezone

from messaging.models import Direction, Message, Status
from tests.api.wire import all_pages, assert_api_error, page_items
from tests.conftest import client_for
from tests.factories import DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db


def _messages(domain, count: int, **fields) -> list[Message]:
    """`count` messages, the first one newest, at distinct created_at."""
    now = timezone.now()
    made = []
    for index in range(count):
        message = MessageFactory(domain=domain, **fields)
        Message.objects.filter(pk=message.pk).update(created_at=now - timedelta(seconds=index))
        made.append(message)
    return made


def _ids(response) -> list[str]:
    return page_items(response)


def _all_pages(api, **params) -> list[str]:
    return all_pages(api, "/v1/messages", **params)


def test_newest_first_with_the_id_breaking_ties_and_twenty_by_default(api, domain):
    made = _messages(domain, 23)
    same_time = timezone.now() + timedelta(minutes=1)
    tied = MessageFactory.create_batch(3, domain=domain)
    Message.objects.filter(pk__in=[m.pk for m in tied]).update(created_at=same_time)

    response = api.get("/v1/messages")

    expected = sorted((m.public_id for m in tied), reverse=True) + [m.public_id for m in made]
    assert _ids(response) == expected[:20]
    assert response.json()["has_more"] is True
    assert _all_pages(api) == expected


def test_list_items_carry_text_null_and_get_carries_the_body(api, domain):
    message = MessageFactory(domain=domain, text="The body")
    item = api.get("/v1/messages").json()["data"][0]
    got = api.get(f"/v1/messages/{message.public_id}").json()
    assert (
        set(item)
        == set(got)
        == {"id", "domain_id", "direction", "from", "to", "subject", "status", "created_at", "text"}
    )
    assert (item["text"], got["text"]) == (None, "The body")
    assert {**item, "text": "The body"} == got


def test_both_directions_by_default_and_one_with_the_filter(api, domain):
    sent = _messages(domain, 3)
    received = _messages(domain, 2, direction=Direction.RECEIVED, status=Status.RECEIVED)
    by_time = sorted(sent + received, key=lambda m: Message.objects.get(pk=m.pk).created_at, reverse=True)

    assert _ids(api.get("/v1/messages")) == [m.public_id for m in by_time]
    assert _all_pages(api, direction="sent", limit=2) == [m.public_id for m in sent]
    assert _all_pages(api, direction="received", limit=1) == [m.public_id for m in received]


@pytest.mark.parametrize("limit", [1, 2, 7, 100])
def test_pages_cover_every_message_once(api, domain, limit):
    made = _messages(domain, 9)
    assert _all_pages(api, limit=limit) == [m.public_id for m in made]


def test_pages_never_skip_or_repeat_while_new_messages_arrive(api, domain):
    made = _messages(domain, 6)
    seen, after = [], None
    for _ in range(3):
        response = api.get("/v1/messages", {"limit": 2, **({"after": after} if after else {})})
        seen += _ids(response)
        after = response.json()["next_cursor"]
        MessageFactory(domain=domain)  # newer than everything already listed
        api.post(
            "/v1/send",
            {"from": "a@acme.example.com", "to": "b@example.org", "subject": "new", "text": "x"},
            format="json",
        )
    assert after is None or api.get("/v1/messages", {"limit": 2, "after": after}).json()["data"] == []
    assert seen == [m.public_id for m in made]


def test_only_the_keys_domain_is_listed(api, domain, other_domain_key):
    mine = MessageFactory(domain=domain)
    MessageFactory(domain=other_domain_key.domain)
    assert _ids(api.get("/v1/messages")) == [mine.public_id]


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=abc", "limit"),
        ("limit=1.5", "limit"),
        ("limit=-1", "limit"),
        ("limit=", "limit"),
        ("limit=%EF%BC%91", "limit"),  # a full-width digit
        ("limit=" + "9" * 5000, "limit"),
        ("limit=1&limit=2", "limit"),
        ("direction=both", "direction"),
        ("direction=", "direction"),
        ("direction=Sent", "direction"),
        ("direction=sent&direction=sent", "direction"),
        ("after=", "after"),
        ("after=" + "a" * 513, "after"),
        ("after=x&after=y", "after"),
        ("page=2", "page"),
        ("Limit=5", "Limit"),
        ("limit=5&offset=10", "offset"),
    ],
)
def test_bad_or_unknown_query_parameters_are_400(api, domain, query, field):
    error = assert_api_error(api.get(f"/v1/messages?{query}"), 400, "ValidationError")
    assert field in error["message"]


@pytest.mark.parametrize("limit", ["1", "100", "020"])
def test_limit_at_its_bounds(api, domain, limit):
    _messages(domain, 3)
    assert len(_ids(api.get("/v1/messages", {"limit": limit}))) == min(int(limit), 3)


class TestCursor:
    @pytest.fixture
    def cursor(self, api, domain) -> str:
        _messages(domain, 3)
        return api.get("/v1/messages", {"limit": 1}).json()["next_cursor"]

    def test_a_tampered_cursor_is_400(self, api, cursor):
        for tampered in (cursor[:-1] + ("A" if cursor[-1] != "A" else "B"), "x" + cursor, cursor[:10], "garbage"):
            error = assert_api_error(api.get("/v1/messages", {"after": tampered}), 400, "InvalidCursor")
            assert "after" in error["message"]

    def test_another_domains_cursor_looks_exactly_like_a_tampered_one(self, api, cursor, other_domain_key):
        _messages(other_domain_key.domain, 3)
        foreign = client_for(other_domain_key).get("/v1/messages", {"limit": 1}).json()["next_cursor"]
        from_foreign = assert_api_error(api.get("/v1/messages", {"after": foreign}), 400, "InvalidCursor")
        from_forged = assert_api_error(api.get("/v1/messages", {"after": "forged"}), 400, "InvalidCursor")
        assert from_foreign["message"] == from_forged["message"]
        # and mine is equally useless to the other domain
        assert_api_error(client_for(other_domain_key).get("/v1/messages", {"after": cursor}), 400, "InvalidCursor")

    def test_a_cursor_only_continues_the_filter_it_was_made_under(self, api, cursor):
        assert_api_error(api.get("/v1/messages", {"after": cursor, "direction": "sent"}), 400, "InvalidCursor")
        sent_cursor = api.get("/v1/messages", {"limit": 1, "direction": "sent"}).json()["next_cursor"]
        assert_api_error(api.get("/v1/messages", {"after": sent_cursor}), 400, "InvalidCursor")
        assert_api_error(api.get("/v1/messages", {"after": sent_cursor, "direction": "received"}), 400, "InvalidCursor")
        assert api.get("/v1/messages", {"after": sent_cursor, "direction": "sent"}).status_code == 200

    def test_a_cursor_may_change_the_page_size(self, api, cursor):
        assert len(_ids(api.get("/v1/messages", {"after": cursor, "limit": 5}))) == 2


class TestGet:
    @pytest.mark.parametrize("bad_id", ["msg_missing", "x" * 256, "%00", "msg_%00", "%C3%A9", "'%20OR%201=1"])
    def test_a_missing_id_is_404(self, api, domain, bad_id):
        assert_api_error(api.get(f"/v1/messages/{bad_id}"), 404, "NotFound")

    def test_an_id_over_256_characters_is_400(self, api, domain):
        error = assert_api_error(api.get(f"/v1/messages/{'x' * 257}"), 400, "ValidationError")
        assert "id" in error["message"]

    def test_another_domains_message_is_404_exactly_like_a_missing_one(self, api, other_domain_key):
        foreign = MessageFactory(domain=other_domain_key.domain)
        hidden = assert_api_error(api.get(f"/v1/messages/{foreign.public_id}"), 404, "NotFound")
        missing = assert_api_error(api.get("/v1/messages/msg_nosuchmessage"), 404, "NotFound")
        assert hidden["message"] == missing["message"]


class TestQueryCounts:
    """Authentication (one query: key and domain), then one query for the page or the message."""

    @pytest.mark.parametrize("count", [1, 30])
    def test_listing_is_two_queries_however_many_messages(self, api, domain, count, django_assert_num_queries):
        _messages(domain, count + 1)
        _messages(domain, 2, direction=Direction.RECEIVED, status=Status.RECEIVED)
        api.get("/v1/messages")  # records the key's last use, a write the next minute skips
        with django_assert_num_queries(2):
            assert api.get("/v1/messages", {"limit": 100}).status_code == 200
        cursor = api.get("/v1/messages", {"limit": 1, "direction": "sent"}).json()["next_cursor"]
        with django_assert_num_queries(2):
            assert api.get("/v1/messages", {"limit": 100, "direction": "sent", "after": cursor}).status_code == 200

    def test_get_is_two_queries(self, api, domain, django_assert_num_queries):
        message = MessageFactory(domain=domain)
        api.get("/v1/messages")
        with django_assert_num_queries(2):
            assert api.get(f"/v1/messages/{message.public_id}").status_code == 200


def test_a_message_of_a_domain_with_the_same_name_prefix_stays_hidden(api, domain):
    lookalike = DomainFactory(name="acme.example.com.evil.org")
    MessageFactory(domain=lookalike)
    assert _ids(api.get("/v1/messages")) == []


@pytest.mark.parametrize("include_text", [False, True])
def test_the_wire_form_is_what_the_documented_serializer_writes(domain, include_text):
    """messaging.wire.message_wire answers the API and fills webhook payloads; MessageSerializer documents
    it in the OpenAPI document. Both must write the same JSON for every field."""
    from mailservice.api.serializers import MessageSerializer
    from messaging.wire import message_wire

    message = MessageFactory(domain=domain, to=["Zoë <zoe@example.org>", "b@example.net"], subject="Ünïcode")
    message.refresh_from_db()  # created_at as the database keeps it (microseconds, UTC)
    documented = MessageSerializer(message, context={"include_text": include_text}).data
    assert message_wire(message, include_text=include_text) == dict(documented)

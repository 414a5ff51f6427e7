"""POST /v1/send/batch: many sends in one request, all or nothing, each message dispatched once."""

import asyncio
import json
from typing import Any

import pytest
from django.core.exceptions import RequestDataTooBig
from django.urls import reverse
from django.utils import timezone

from apikeys.models import ApiKey
from config.asgi import BodyLimit
from domains.models import DailyUsage, Domain
from domains.services import sending_pause
from mailservice.api.middleware import BATCH_PATH, max_body_bytes
from messaging.models import EventType, IdempotencyKey, Message, MessageEvent, Status
from tests.api.wire import assert_api_error, inline_body, template_body
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, TemplateVersionFactory

pytestmark = pytest.mark.django_db
# Tests marked with `sql_path` run on both storing paths: the one statement (PostgreSQL) and its ORM twin.


def batch(*items: dict[str, Any]) -> dict[str, Any]:
    return {"messages": list(items)}


def numbered(count: int, **changes: Any) -> dict[str, Any]:
    """A batch of `count` valid inline sends, each subject its index."""
    return batch(*(inline_body(subject=str(index), **changes) for index in range(count)))


def post(client: Any, body: Any, **headers: str) -> Any:
    return client.post("/v1/send/batch", body, format="json", **headers)


@pytest.fixture
def test_api(domain: Domain) -> Any:
    key = ApiKeyFactory(domain=domain)
    ApiKey.objects.filter(pk=key.pk).update(is_test=True)
    return client_for(key)


def today_count(domain: Domain) -> int:
    row = DailyUsage.objects.filter(domain=domain, day=timezone.now().date()).first()
    return row.sent_count if row else 0


class TestAccepted:
    @pytest.mark.usefixtures("sql_path")
    def test_the_ids_come_in_the_order_of_the_items_each_stored_accepted_with_its_event(self, api, domain):
        response = post(api, numbered(5))

        assert response.status_code == 200, response.json()
        data = response.json()["data"]
        assert [set(item) for item in data] == [{"id", "created_at"}] * 5
        messages = {m.public_id: m for m in Message.objects.filter(public_id__in=[item["id"] for item in data])}
        assert [messages[item["id"]].subject for item in data] == ["0", "1", "2", "3", "4"]
        assert {message.status for message in messages.values()} == {Status.ACCEPTED}
        events = MessageEvent.objects.filter(message__domain=domain)
        assert sorted(events.values_list("message__public_id", "type")) == sorted(
            (item["id"], EventType.ACCEPTED) for item in data
        )

    @pytest.mark.usefixtures("sql_path")
    def test_inline_and_template_items_mix(self, api, domain):
        version = TemplateVersionFactory(template__domain=domain)
        template = {"id": version.template.slug, "variables": {"name": "Ada"}}

        response = post(api, batch(inline_body(), template_body(template), template_body(template)))

        assert response.status_code == 200, response.json()
        ids = [item["id"] for item in response.json()["data"]]
        stored = {m.public_id: m for m in Message.objects.filter(public_id__in=ids)}
        assert [(stored[each].subject, stored[each].template_version) for each in ids] == [
            ("Hi", None),
            ("Hello Ada", version.number),
            ("Hello Ada", version.number),
        ]

    def test_500_messages_are_accepted_and_each_dispatched_once(
        self, api, domain, settings, tmp_path, django_capture_on_commit_callbacks
    ):
        settings.MAILSERVICE_OUTBOX_DIR = tmp_path
        with django_capture_on_commit_callbacks(execute=True):
            response = post(api, numbered(500))

        assert response.status_code == 200, response.json()
        ids = {item["id"] for item in response.json()["data"]}
        assert len(ids) == 500
        assert {path.stem for path in tmp_path.glob("*.eml")} == ids
        delivered = MessageEvent.objects.filter(message__domain=domain, type=EventType.DELIVERED)
        assert sorted(delivered.values_list("message__public_id", flat=True)) == sorted(ids)
        assert set(Message.objects.filter(domain=domain).values_list("status", flat=True)) == {Status.DELIVERED}

    def test_bodies_of_100_000_characters_fit_within_the_byte_limit(self, api, settings):
        body = numbered(40, text="x" * 100_000, html="y" * 100_000)
        size = len(json.dumps(body))
        assert settings.DATA_UPLOAD_MAX_MEMORY_SIZE < size < settings.MAILSERVICE_BATCH_MAX_BYTES

        response = post(api, body)

        assert response.status_code == 200, response.json()
        assert Message.objects.filter(text="x" * 100_000).count() == 40


class TestAllOrNothing:
    def test_one_bad_item_among_500_is_named_and_nothing_is_stored(self, api):
        body = numbered(500)
        body["messages"][337]["to"] = ["bob@example.org", "not an address"]

        error = assert_api_error(post(api, body), 400, "ValidationError")

        assert error["message"].startswith("messages.337.to.1: ")
        assert not Message.objects.exists()

    @pytest.mark.parametrize(("count", "status"), [(0, 400), (1, 200), (500, 200), (501, 400)])
    def test_a_batch_holds_1_to_500_messages(self, api, count, status):
        response = post(api, numbered(count))

        assert response.status_code == status
        assert Message.objects.count() == (count if status == 200 else 0)
        if status == 400:
            assert response.json()["error"]["message"].startswith("messages: ")

    @pytest.mark.parametrize(
        ("body", "message"),
        [
            ([inline_body()], "The request body must be a JSON object"),
            ({"messages": inline_body()}, "messages: must be a list of 1 to 500 messages"),
            ({**batch(inline_body()), "extra": 1}, "extra: unknown field"),
            (batch(inline_body(), "not an object"), "messages.1: must be a JSON object"),
            (batch(inline_body(subject=None)), "messages.0.subject: "),
        ],
    )
    def test_a_malformed_body_is_refused_naming_what_is_wrong(self, api, body, message):
        error = assert_api_error(post(api, body), 400, "ValidationError")

        assert error["message"].startswith(message)

    def test_a_sender_off_the_domain_is_refused_as_a_single_send_naming_the_item(self, api):
        body = batch(inline_body(), inline_body(**{"from": "eve@elsewhere.example"}))

        error = assert_api_error(post(api, body), 403, "SenderNotAllowed")

        assert error["message"].startswith("messages.1.from: the sender must be on this key's domain")
        assert not Message.objects.exists()

    def test_a_missing_template_is_refused_naming_the_item(self, api):
        body = batch(inline_body(), inline_body(), template_body({"id": "nowhere"}))

        error = assert_api_error(post(api, body), 400, "TemplateNotFound")

        assert error["message"] == "messages.2.template.id: no template 'nowhere' on this domain"

    def test_body_problems_come_before_any_sender_check(self, api):
        body = batch(inline_body(**{"from": "eve@elsewhere.example"}), inline_body(to="nobody"))

        assert_api_error(post(api, body), 400, "ValidationError")

    def test_an_unverified_domain_stores_nothing(self, api, domain):
        Domain.objects.filter(pk=domain.pk).update(verified=False)

        assert_api_error(post(api, numbered(3)), 400, "DomainNotVerified")
        assert not Message.objects.exists()

    @pytest.mark.usefixtures("sql_path")
    @pytest.mark.parametrize("globally", [False, True], ids=["domain", "global"])
    def test_a_paused_domain_stores_nothing(self, api, domain, globally):
        sending_pause(domain=None if globally else domain, actor="ops")

        assert_api_error(post(api, numbered(3)), 503, "SendingPaused")
        assert not Message.objects.exists()
        assert today_count(domain) == 0


@pytest.mark.usefixtures("sql_path")
class TestAllowance:
    @pytest.mark.parametrize(("sent_before", "status"), [(0, 200), (2, 200), (3, 429)])
    def test_the_allowance_must_hold_every_message(self, api, domain, sent_before, status):
        domain.daily_allowance = 5
        domain.save()
        DailyUsage.objects.create(domain=domain, day=timezone.now().date(), sent_count=sent_before)

        response = post(api, numbered(3))

        assert response.status_code == status
        assert today_count(domain) == sent_before + (3 if status == 200 else 0)
        assert Message.objects.count() == (3 if status == 200 else 0)
        if status == 429:
            assert_api_error(response, 429, "AllowanceExhausted")
            assert int(response["Retry-After"]) > 0

    def test_the_days_first_batch_opens_the_counter(self, api, domain):
        domain.daily_allowance = 3
        domain.save()

        assert_api_error(post(api, numbered(4)), 429, "AllowanceExhausted")
        assert post(api, numbered(3)).status_code == 200
        assert today_count(domain) == 3


class TestIdempotency:
    KEY = {"HTTP_IDEMPOTENCY_KEY": "newsletter-2026-11/batch-1"}

    def test_a_replay_answers_the_first_response_and_sends_nothing_more(self, api):
        first = post(api, numbered(3), **self.KEY)
        again = post(api, numbered(3), **self.KEY)

        assert first.status_code == again.status_code == 200
        assert again.json() == first.json()
        assert again.headers["Idempotent-Replayed"] == "true"
        assert Message.objects.count() == 3

    def test_the_same_key_with_another_batch_is_refused(self, api):
        post(api, numbered(3), **self.KEY)

        assert_api_error(post(api, numbered(4), **self.KEY), 409, "IdempotencyKeyReused")
        assert Message.objects.count() == 3

    def test_a_refused_batch_does_not_use_up_the_key(self, api, domain):
        sending_pause(domain=domain, actor="ops")
        assert_api_error(post(api, numbered(2), **self.KEY), 503, "SendingPaused")

        assert not IdempotencyKey.objects.exists()


@pytest.mark.usefixtures("sql_path")
class TestSandbox:
    def test_a_test_keys_batch_is_stored_as_test_messages_outside_the_allowance(
        self, test_api, domain, settings, tmp_path, django_capture_on_commit_callbacks
    ):
        settings.MAILSERVICE_OUTBOX_DIR = tmp_path
        domain.daily_allowance = 1
        domain.save()

        with django_capture_on_commit_callbacks(execute=True):
            response = post(test_api, numbered(3, to="bounced@simulator.test"))

        assert response.status_code == 200, response.json()
        assert set(Message.objects.values_list("is_test", "status")) == {(True, Status.BOUNCED)}
        assert today_count(domain) == 0
        assert not list(tmp_path.iterdir())  # simulated: nothing handed to SMTP or the outbox


class TestPermissions:
    def test_a_read_only_key_may_not_send(self, read_only_key):
        assert_api_error(post(client_for(read_only_key), numbered(2)), 403, "MissingPermission")
        assert not Message.objects.exists()

    def test_no_key_is_401(self):
        assert_api_error(post(client_for(None), numbered(2)), 401, "Unauthorized")

    def test_another_domains_key_may_not_send_from_this_one(self, other_domain_key):
        assert_api_error(post(client_for(other_domain_key), numbered(2)), 403, "SenderNotAllowed")


class TestBodyLimit:
    def test_the_batch_path_has_its_own_limit(self, settings):
        assert reverse("send-batch") == BATCH_PATH
        assert max_body_bytes(BATCH_PATH) == settings.MAILSERVICE_BATCH_MAX_BYTES == 40 * 1024 * 1024
        assert max_body_bytes("/v1/send") == settings.DATA_UPLOAD_MAX_MEMORY_SIZE

    @pytest.mark.parametrize(("extra", "status"), [(0, 200), (1, 413)])
    def test_a_body_past_the_batch_limit_is_413(self, api, settings, extra, status):
        content = json.dumps(numbered(2)).encode()
        settings.MAILSERVICE_BATCH_MAX_BYTES = len(content) - extra  # at the limit, then one byte short of the body

        response = api.generic("POST", "/v1/send/batch", content, content_type="application/json")

        assert response.status_code == status
        if status == 413:
            assert_api_error(response, 413, "RequestTooLarge")
            assert not Message.objects.exists()

    @pytest.mark.parametrize(("path", "status"), [("/v1/send", 413), ("/v1/send/batch", 200)])
    def test_the_asgi_server_holds_a_chunked_body_to_the_paths_limit(self, settings, path, status):
        """config/asgi.py hands a chunked body on with the path's limit as its length, and refuses past it."""
        settings.MAILSERVICE_BATCH_MAX_BYTES = 2 * settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        body = b"x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)
        assert asyncio.run(_asgi_status(path, body)) == status


async def _asgi_status(path: str, body: bytes) -> int:
    """The status an application reading the body through BodyLimit answers `body` sent chunked on `path` with:
    200 once read whole, 413 for the RequestDataTooBig the read raised."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            message = await receive()
            status = 200 if message["body"] == body and not message["more_body"] else 500
        except RequestDataTooBig:
            status = 413
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    half = len(body) // 2
    messages = [
        {"type": "http.request", "body": body[:half], "more_body": True},
        {"type": "http.request", "body": body[half:], "more_body": False},
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "path": path, "headers": [(b"transfer-encoding", b"chunked")]}
    await BodyLimit(app, limit_of=max_body_bytes)(scope, receive, send)
    return sent[0]["status"]

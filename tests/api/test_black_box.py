"""Every rule of the wire contract, checked against a real gunicorn over HTTP."""

import json
import re
from typing import Any

import httpx
import pytest

from apikeys.models import ApiKey
from apikeys.services import apikey_revoke
from domains.models import Domain
from domains.services import domain_mark_verified, domain_set_allowance, sending_pause, sending_resume
from messaging.models import Message
from tests.api.wire import assert_api_error, bearer, inline_body
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

MAX_BODY = 4 * 1024 * 1024


def _fully_escaped(value: Any) -> str:
    """JSON with every character of every string written as \\uXXXX (astral ones as surrogate pairs)."""
    if isinstance(value, str):
        units = value.encode("utf-16-be")
        return '"' + "".join(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2)) + '"'
    if isinstance(value, list):
        return "[" + ",".join(_fully_escaped(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{_fully_escaped(k)}:{_fully_escaped(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def _longest_mailbox(domain: str) -> str:
    return "\U0001f600" * (320 - len(f"@{domain}")) + f"@{domain}"


class TestEveryFailureIsAnApiError:
    @pytest.mark.parametrize(
        "authorization",
        [
            None,
            "",
            "Bearer",
            "Bearer two words",
            "Basic dXNlcjpwYXNz",
            "Bearer ms_unknownprefx_0123456789012345678901234567890123456789",
            "Bearer not-a-key",
            "Token ms_unknownprefx_0123456789012345678901234567890123456789",
        ],
    )
    def test_missing_invalid_or_malformed_authorization_is_401(self, http, full_key, authorization):
        headers = {} if authorization is None else {"Authorization": authorization}
        for response in (
            http.get("/v1/messages", headers=headers),
            http.post("/v1/send", headers=headers, json=inline_body()),
        ):
            assert_api_error(response, 401, "Unauthorized")

    def test_a_revoked_key_is_401(self, http, full_key):
        apikey_revoke(api_key=full_key)
        assert_api_error(http.get("/v1/messages", headers=bearer(full_key)), 401, "Unauthorized")

    def test_a_wrong_secret_for_a_real_prefix_is_401(self, http, full_key):
        forged = full_key.secret[:-4] + "zzzz"
        assert_api_error(http.get("/v1/messages", headers={"Authorization": f"Bearer {forged}"}), 401, "Unauthorized")

    def test_a_key_without_the_permission_is_403(self, http, read_only_key, send_only_key):
        assert_api_error(
            http.post("/v1/send", headers=bearer(read_only_key), json=inline_body()), 403, "MissingPermission"
        )
        assert_api_error(http.get("/v1/messages", headers=bearer(send_only_key)), 403, "MissingPermission")
        assert_api_error(http.get("/v1/messages/msg_x", headers=bearer(send_only_key)), 403, "MissingPermission")

    @pytest.mark.parametrize("method", ["GET", "POST"])
    @pytest.mark.parametrize(
        "path", ["/nope", "/v1", "/v1/", "/v1/nope", "/v1/messages/", "/v1/send/", "/v1/send/x", "/static/x"]
    )
    def test_unknown_paths_are_404_whatever_the_method(self, http, full_key, method, path):
        # A POST never meets the console's CSRF check (a 403 the API does not document).
        response = http.request(method, path, headers=bearer(full_key), json=inline_body())
        assert_api_error(response, 404, "NotFound")

    def test_the_landing_page_links_the_docs_the_console_and_the_readme(self, http):
        page = http.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        assert all(f'href="{link}"' in page.text for link in ("/docs/", "/admin/", "/readme"))
        assert http.get("/readme").text.startswith("# mailservice")
        assert_api_error(http.post("/", json={}), 405, "MethodNotAllowed")

    @pytest.mark.parametrize(
        ("method", "path"),
        [("GET", "/v1/send"), ("PUT", "/v1/send"), ("DELETE", "/v1/messages"), ("POST", "/v1/messages/msg_x")]
        + [("PATCH", "/v1/messages"), ("OPTIONS", "/v1/send")],
    )
    def test_other_methods_are_405(self, http, full_key, method, path):
        assert_api_error(http.request(method, path, headers=bearer(full_key)), 405, "MethodNotAllowed")

    @pytest.mark.parametrize("content", [b"{", b'{"from": }', b"\xff\xfe", b"[1,]", b'{"subject": NaN}'])
    def test_malformed_json_is_400(self, http, full_key, content):
        headers = {**bearer(full_key), "Content-Type": "application/json"}
        assert_api_error(http.post("/v1/send", headers=headers, content=content), 400, "InvalidJson")

    @pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data"])
    def test_a_body_that_is_not_json_is_400(self, http, full_key, content_type):
        headers = {**bearer(full_key), "Content-Type": content_type}
        response = http.post("/v1/send", headers=headers, content=json.dumps(inline_body()).encode())
        assert_api_error(response, 400, "InvalidContentType")
        assert not Message.objects.exists()

    def test_a_body_without_content_type_is_400(self, http, full_key):
        response = http.post("/v1/send", headers=bearer(full_key), content=json.dumps(inline_body()).encode())
        assert_api_error(response, 400, "InvalidContentType")

    def test_a_body_over_the_cap_is_413(self, http, full_key):
        body = json.dumps(inline_body(text="x" * MAX_BODY)).encode()
        headers = {**bearer(full_key), "Content-Type": "application/json"}
        assert_api_error(http.post("/v1/send", headers=headers, content=body), 413, "RequestTooLarge")
        assert not Message.objects.exists()

    def test_a_validation_failure_is_400(self, http, full_key):
        error = assert_api_error(
            http.post("/v1/send", headers=bearer(full_key), json=inline_body(subject=5)), 400, "ValidationError"
        )
        assert "subject" in error["message"]

    def test_djangos_own_rejections_use_the_envelope(self, http, full_key):
        response = http.get("/v1/messages", headers={**bearer(full_key), "Host": "evil.example"})
        assert_api_error(response, 400, "BadRequest")

    def test_every_request_id_is_fresh(self, http, full_key):
        ids = {http.get("/v1/messages", headers=bearer(full_key)).headers["x-request-id"] for _ in range(5)}
        assert len(ids) == 5


class TestHeaders:
    @pytest.mark.parametrize("accept", ["text/html", "application/xml", "*/*", "application/json; q=0"])
    def test_the_answer_is_json_whatever_accept_says(self, http, full_key, accept):
        ok = http.get("/v1/messages", headers={**bearer(full_key), "Accept": accept})
        assert (ok.status_code, ok.headers["content-type"]) == (200, "application/json")
        assert_api_error(
            http.get("/v1/messages/msg_x", headers={**bearer(full_key), "Accept": accept}), 404, "NotFound"
        )
        assert http.get("/v1/openapi.json", headers={"Accept": accept}).json()["openapi"] == "3.1.0"

    @pytest.mark.parametrize("path", ["/v1/messages", "/v1/openapi.json", "/docs/"])
    def test_successful_responses_carry_a_request_id_and_are_not_cached(self, http, full_key, path):
        response = http.get(path, headers=bearer(full_key))
        assert response.status_code == 200
        assert response.headers["x-request-id"].startswith("req_")
        assert response.headers["cache-control"] == "no-store"


def test_the_docs_page_and_its_assets_are_served_by_the_production_server(http):
    page = http.get("/docs/")
    assets = re.findall(r"""(?:src|href)=["'](/static/[^"']+)["']""", page.text)
    assert page.status_code == 200 and len(assets) >= 3
    for asset in assets:
        response = http.get(asset)
        assert response.status_code == 200 and response.content, asset


class TestTheLargestValidRequest:
    def test_every_field_at_its_limit_fully_escaped_is_accepted(self, http, full_key):
        astral = "\U0001f600"
        body = inline_body(
            **{"from": _longest_mailbox("acme.example.com")},
            to=[_longest_mailbox("example.org")] * 20,
            cc=[_longest_mailbox("example.org")] * 20,
            bcc=[_longest_mailbox("example.org")] * 10,
            replyTo=[_longest_mailbox("example.org")] * 10,
            subject=astral * 100000,
            text=astral * 100000,
            html=astral * 100000,
        )
        content = _fully_escaped(body).encode("ascii")
        assert 3_800_000 < len(content) <= MAX_BODY

        response = http.post(
            "/v1/send", headers={**bearer(full_key), "Content-Type": "application/json"}, content=content
        )

        assert response.status_code == 200, response.text[:300]
        stored = Message.objects.get(public_id=response.json()["id"])
        assert (stored.subject, stored.html, len(stored.to)) == (body["subject"], body["html"], 20)


class TestCheckOrder:
    """401 > 403 permission > 400 body > 403 foreign sender > 400 unverified > 503 paused > 429 allowance."""

    def test_each_check_wins_over_the_ones_after_it(self, http):
        domain = DomainFactory(name="acme.example.com", verified=False, daily_allowance=0)
        read_only = ApiKeyFactory(domain=domain, permissions=("email.read",))
        key = ApiKeyFactory(domain=domain)
        sending_pause(domain=domain, actor="test")
        sending_pause(domain=None, actor="test")
        foreign = inline_body(**{"from": "x@other.example.net"}, subject=5)

        def send(api_key: ApiKey | None, body: dict[str, Any]) -> httpx.Response:
            return http.post("/v1/send", headers=bearer(api_key) if api_key else {}, json=body)

        assert_api_error(send(None, foreign), 401, "Unauthorized")
        assert_api_error(send(read_only, foreign), 403, "MissingPermission")
        assert_api_error(send(key, foreign), 400, "ValidationError")
        assert_api_error(send(key, inline_body(**{"from": "x@other.example.net"})), 403, "SenderNotAllowed")
        assert_api_error(send(key, inline_body()), 400, "DomainNotVerified")
        domain_mark_verified(domain=domain, actor="test")
        paused = assert_api_error(send(key, inline_body()), 503, "SendingPaused")
        assert "no message was sent" in paused["message"]
        sending_resume(domain=domain)
        assert_api_error(send(key, inline_body()), 503, "SendingPaused")  # the global switch still holds
        sending_resume(domain=None)
        sending_pause(domain=domain, actor="test")
        assert_api_error(send(key, inline_body()), 503, "SendingPaused")  # and the domain's alone too
        sending_resume(domain=domain)
        exhausted = send(key, inline_body())
        assert_api_error(exhausted, 429, "AllowanceExhausted")
        assert 0 < int(exhausted.headers["retry-after"]) <= 86401
        assert not Message.objects.exists()

        domain_set_allowance(domain=Domain.objects.get(pk=domain.pk), allowance=1)
        assert send(key, inline_body()).status_code == 200
        assert_api_error(send(key, inline_body()), 429, "AllowanceExhausted")
        assert Message.objects.count() == 1

    @pytest.mark.parametrize(
        ("sender", "allowed"),
        [
            ("x@acme.example.com", True),
            ("X <X@ACME.Example.COM>", True),
            ("x@sub.acme.example.com", False),
            ("x@acme.example.com.evil.org", False),
            ("x@notacme.example.com", False),
            ("x@example.com", False),
            ("acme.example.com <x@other.example.net>", False),
        ],
    )
    def test_the_sender_must_be_exactly_on_the_keys_domain(self, http, full_key, sender, allowed):
        response = http.post("/v1/send", headers=bearer(full_key), json=inline_body(**{"from": sender}))
        if allowed:
            assert response.status_code == 200, response.text
        else:
            assert_api_error(response, 403, "SenderNotAllowed")


class TestReading:
    def test_a_send_is_listed_newest_first_and_read_back_with_its_body(self, http, full_key, domain):
        older = MessageFactory(domain=domain, text=None)
        sent = http.post("/v1/send", headers=bearer(full_key), json=inline_body(text="Body text")).json()

        listed = http.get("/v1/messages", headers=bearer(full_key)).json()
        got = http.get(f"/v1/messages/{sent['id']}", headers=bearer(full_key)).json()
        got_older = http.get(f"/v1/messages/{older.public_id}", headers=bearer(full_key)).json()

        assert [item["id"] for item in listed["data"]] == [sent["id"], older.public_id]
        assert [item["text"] for item in listed["data"]] == [None, None]
        assert (listed["has_more"], listed["next_cursor"]) == (False, None)
        assert got == {
            "id": sent["id"],
            "domain_id": domain.public_id,
            "direction": "sent",
            "from": "Acme <hello@acme.example.com>",
            "to": ["bob@example.org"],
            "subject": "Hi",
            "status": "accepted",
            "created_at": sent["created_at"],
            "text": "Body text",
        }
        assert got_older["text"] is None

    def test_another_domains_message_is_404_exactly_like_a_missing_one(self, http, full_key, other_domain_key):
        foreign = MessageFactory(domain=other_domain_key.domain)
        missing = assert_api_error(http.get("/v1/messages/msg_missing", headers=bearer(full_key)), 404, "NotFound")
        hidden = assert_api_error(
            http.get(f"/v1/messages/{foreign.public_id}", headers=bearer(full_key)), 404, "NotFound"
        )
        assert hidden["message"] == missing["message"]
        assert foreign.public_id not in json.dumps(hidden)

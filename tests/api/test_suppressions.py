"""/v1/suppressions: list, get, add and remove, each confined to the key's domain and side, with the
error envelope for every bad input (hostile addresses in the path included)."""

from datetime import timedelta
from io import StringIO
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.utils import timezone

from apikeys.models import ApiKey, Permission
from messaging.models import Status, Suppression, SuppressionReason
from messaging.outbound.dispatch import dispatch_batch
from tests.api.wire import all_pages, assert_api_error, inline_body, page_items
from tests.conftest import client_for
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory, SuppressionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def writer(domain):
    return client_for(ApiKeyFactory(domain=domain, permissions=(Permission.READ, Permission.SUPPRESSIONS_WRITE)))


@pytest.fixture
def sandbox(domain):
    """A test key of the domain, with every permission."""
    return client_for(ApiKeyFactory(domain=domain, permissions=tuple(Permission.values), is_test=True))


def _entries(domain, count: int, **fields) -> list[Suppression]:
    """`count` entries, the first one newest, at distinct created_at."""
    now = timezone.now()
    made = []
    for index in range(count):
        entry = SuppressionFactory(domain=domain, **fields)
        Suppression.objects.filter(pk=entry.pk).update(created_at=now - timedelta(seconds=index))
        made.append(entry)
    return made


def _emails(response) -> list[str]:
    return page_items(response, "email")


def _path(email: str) -> str:
    return f"/v1/suppressions/{quote(email, safe='')}"


# --- reading -------------------------------------------------------------------------------------------------------


def test_an_entry_is_shown_with_every_field_and_the_message_that_caused_it(api, domain):
    message = MessageFactory(domain=domain)
    expires = timezone.now() + timedelta(days=3)
    SuppressionFactory(
        domain=domain,
        address="full@example.org",
        reason=SuppressionReason.SOFT_BOUNCE,
        source_message=message,
        detail="452 4.2.2 mailbox full",
        expires_at=expires,
    )

    response = api.get(_path("Full@Example.org"))

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"email", "reason", "created_at", "expires_at", "message_id", "detail"}
    assert body["email"] == "full@example.org" and body["reason"] == "soft_bounce"
    assert body["message_id"] == message.public_id and body["detail"] == "452 4.2.2 mailbox full"
    assert body["expires_at"].endswith("Z") and body["created_at"].endswith("Z")


@pytest.mark.parametrize(
    ("stored", "wire"),
    [
        (SuppressionReason.BOUNCE, "hard_bounce"),
        (SuppressionReason.SOFT_BOUNCE, "soft_bounce"),
        (SuppressionReason.COMPLAINT, "complaint"),
        (SuppressionReason.MANUAL, "manual"),
    ],
)
def test_reasons_are_named_as_the_api_documents_them(api, domain, stored, wire):
    SuppressionFactory(domain=domain, address="a@example.org", reason=stored)

    assert api.get(_path("a@example.org")).json()["reason"] == wire


def test_the_list_is_newest_first_twenty_by_default_and_every_page_follows_without_gaps(api, domain):
    made = [entry.address for entry in _entries(domain, 45)]

    first = api.get("/v1/suppressions")
    assert _emails(first) == made[:20] and first.json()["has_more"] is True
    assert all_pages(api, "/v1/suppressions", "email", limit="7") == made


def test_entries_created_at_the_same_moment_page_by_address(api, domain):
    made = _entries(domain, 5)
    Suppression.objects.filter(pk__in=[entry.pk for entry in made]).update(created_at=timezone.now())

    first = api.get("/v1/suppressions", {"limit": "2"})
    rest = api.get("/v1/suppressions", {"limit": "10", "after": first.json()["next_cursor"]})

    assert _emails(first) + _emails(rest) == sorted((entry.address for entry in made), reverse=True)


def test_filters_by_reason_and_by_address(api, domain):
    _entries(domain, 3, reason=SuppressionReason.COMPLAINT)
    manual = _entries(domain, 2, reason=SuppressionReason.MANUAL)

    assert _emails(api.get("/v1/suppressions", {"reason": "manual"})) == [entry.address for entry in manual]
    assert _emails(api.get("/v1/suppressions", {"email": manual[1].address.upper()})) == [manual[1].address]
    assert _emails(api.get("/v1/suppressions", {"email": "nobody@example.org"})) == []


def test_a_cursor_only_continues_the_filters_it_was_made_with(api, domain):
    _entries(domain, 3, reason=SuppressionReason.MANUAL)
    cursor = api.get("/v1/suppressions", {"limit": "1", "reason": "manual"}).json()["next_cursor"]

    assert_api_error(api.get("/v1/suppressions", {"after": cursor}), 400, "InvalidCursor")
    assert _emails(api.get("/v1/suppressions", {"after": cursor, "reason": "manual"}))


def test_the_list_costs_the_same_number_of_queries_whatever_the_page(api, domain, django_assert_max_num_queries):
    for entry in _entries(domain, 30):
        entry.source_message = MessageFactory(domain=domain)
        entry.save()

    with django_assert_max_num_queries(3):  # the key (uncached in tests), the page with its messages
        assert len(_emails(api.get("/v1/suppressions", {"limit": "30"}))) == 30


# --- writing -------------------------------------------------------------------------------------------------------


def test_put_adds_a_manual_entry_under_the_address_the_list_compares(writer, domain):
    response = writer.put(_path("Ada <Ada@Example.ORG>"), {"detail": "asked to be removed"}, format="json")

    assert response.status_code == 200
    assert response.json()["email"] == "ada@example.org" and response.json()["reason"] == "manual"
    entry = Suppression.objects.get(domain=domain)
    assert (entry.address, entry.detail, entry.is_test) == ("ada@example.org", "asked to be removed", False)


@pytest.mark.parametrize("body", [{}, None])
def test_put_takes_an_empty_object_or_no_body(writer, domain, body):
    response = writer.put(_path("b@example.org"), body, format="json" if body is not None else None)

    assert response.status_code == 200 and response.json()["detail"] == ""


def test_put_of_an_address_already_suppressed_returns_the_entry_unchanged(writer, domain):
    SuppressionFactory(domain=domain, address="gone@example.org", reason=SuppressionReason.BOUNCE, detail="550")

    response = writer.put(_path("gone@example.org"), {"detail": "other"}, format="json")

    assert response.status_code == 200
    assert (response.json()["reason"], response.json()["detail"]) == ("hard_bounce", "550")
    assert Suppression.objects.get(domain=domain).reason == SuppressionReason.BOUNCE


def test_delete_removes_the_entry_and_a_second_delete_is_a_404(writer, domain):
    SuppressionFactory(domain=domain, address="gone@example.org")

    response = writer.delete(_path("GONE@example.org"))

    assert response.status_code == 204 and response.content == b""
    assert not Suppression.objects.filter(domain=domain).exists()
    assert_api_error(writer.delete(_path("gone@example.org")), 404, "NotFound")


def test_after_a_delete_the_next_send_to_the_address_goes_out(writer, domain, settings, tmp_path):
    settings.EMAIL_URL, settings.MAILSERVICE_OUTBOX_DIR = None, tmp_path
    sender = client_for(ApiKeyFactory(domain=domain, permissions=(Permission.SEND,)))
    writer.put(_path("bob@example.org"), {}, format="json")

    def send() -> str:
        response = sender.post("/v1/send", inline_body(to="bob@example.org"), format="json")
        assert response.status_code == 200, response.json()
        dispatch_batch(public_id=response.json()["id"])
        return MessageFactory._meta.model.objects.get(public_id=response.json()["id"]).status

    assert send() == Status.FAILED  # every recipient suppressed
    assert writer.delete(_path("bob@example.org")).status_code == 204
    assert send() == Status.DELIVERED
    assert len(list(tmp_path.iterdir())) == 1


# --- permissions and isolation -------------------------------------------------------------------------------------


def test_reading_needs_email_read_and_writing_needs_suppressions_write(domain, send_only_key, read_only_key):
    SuppressionFactory(domain=domain, address="gone@example.org")
    send_only, read_only = client_for(send_only_key), client_for(read_only_key)

    for response in (send_only.get("/v1/suppressions"), send_only.get(_path("gone@example.org"))):
        assert "email.read" in assert_api_error(response, 403, "MissingPermission")["message"]
    for response in (
        read_only.put(_path("new@example.org"), {}, format="json"),
        read_only.delete(_path("gone@example.org")),
    ):
        assert "suppressions.write" in assert_api_error(response, 403, "MissingPermission")["message"]
    assert Suppression.objects.filter(domain=domain).count() == 1
    assert_api_error(client_for(None).get("/v1/suppressions"), 401, "Unauthorized")


def test_keys_are_created_without_suppressions_write_unless_asked():
    assert Permission.SUPPRESSIONS_WRITE not in ApiKeyFactory().permissions
    assert ApiKeyFactory(permissions=(Permission.SUPPRESSIONS_WRITE,)).permissions == [Permission.SUPPRESSIONS_WRITE]


def test_another_domains_entries_are_absent_and_untouchable(writer, domain):
    other = DomainFactory(name="other.example.net")
    SuppressionFactory(domain=other, address="theirs@example.org")

    assert _emails(writer.get("/v1/suppressions")) == []
    assert_api_error(writer.get(_path("theirs@example.org")), 404, "NotFound")
    assert_api_error(writer.delete(_path("theirs@example.org")), 404, "NotFound")
    writer.put(_path("theirs@example.org"), {}, format="json")
    assert Suppression.objects.filter(address="theirs@example.org").count() == 2  # each domain its own entry


def test_a_cursor_of_another_domain_is_refused(api, domain):
    other = client_for(ApiKeyFactory(domain=DomainFactory(name="other.example.net")))
    SuppressionFactory.create_batch(3, domain=DomainFactory._meta.model.objects.get(name="other.example.net"))
    cursor = other.get("/v1/suppressions", {"limit": "1"}).json()["next_cursor"]

    assert_api_error(api.get("/v1/suppressions", {"after": cursor}), 400, "InvalidCursor")


def test_a_test_key_has_the_sandbox_list_and_sees_nothing_of_the_live_one(writer, sandbox, domain):
    SuppressionFactory(domain=domain, address="live@example.org")
    sandbox.put(_path("sandbox@example.org"), {}, format="json")

    assert _emails(sandbox.get("/v1/suppressions")) == ["sandbox@example.org"]
    assert _emails(writer.get("/v1/suppressions")) == ["live@example.org"]
    assert_api_error(sandbox.get(_path("live@example.org")), 404, "NotFound")
    assert_api_error(sandbox.delete(_path("live@example.org")), 404, "NotFound")
    assert_api_error(writer.get(_path("sandbox@example.org")), 404, "NotFound")
    cursor_owner = client_for(ApiKeyFactory(domain=domain, is_test=True))
    SuppressionFactory.create_batch(2, domain=domain, is_test=True)
    cursor = cursor_owner.get("/v1/suppressions", {"limit": "1"}).json()["next_cursor"]
    assert_api_error(writer.get("/v1/suppressions", {"after": cursor}), 400, "InvalidCursor")


def test_the_sandbox_list_holds_back_only_test_keys_sends(domain, settings, tmp_path):
    settings.EMAIL_URL, settings.MAILSERVICE_OUTBOX_DIR = None, tmp_path
    SuppressionFactory(domain=domain, address="bob@example.org", is_test=True)
    due = timezone.now() - timedelta(seconds=1)
    test_message = MessageFactory(domain=domain, is_test=True, to=["bob@example.org"], next_attempt_at=due)
    live_message = MessageFactory(domain=domain, to=["bob@example.org"], next_attempt_at=due)

    for message in (test_message, live_message):
        dispatch_batch(public_id=message.public_id)
        message.refresh_from_db()

    assert (test_message.status, live_message.status) == (Status.FAILED, Status.DELIVERED)


# --- bad input -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/v1/suppressions/not-an-address",
        "/v1/suppressions/a%0D%0ABcc%3A%20x%40example.org%40example.org",  # CRLF
        "/v1/suppressions/bob%40example.org%0D%0A",
        "/v1/suppressions/bob%00%40example.org",  # NUL
        "/v1/suppressions/" + "a" * 310 + "%40example.org",  # 322 characters
        "/v1/suppressions/" + "a" * 5000 + "%40example.org",
        "/v1/suppressions/%3Cbob%40example.org%3E%3Cx%40example.org%3E",
        "/v1/suppressions/bob%40exa%2Fmple.org",
        "/v1/suppressions/bob@",
    ],
)
@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_hostile_addresses_in_the_path_are_a_validation_error(writer, domain, path, method):
    response = getattr(writer, method)(path, **({"data": {}, "format": "json"} if method == "put" else {}))

    assert_api_error(response, 400, "ValidationError")
    assert not Suppression.objects.exists()


def test_an_address_at_the_length_limit_is_taken_and_one_past_it_refused(writer, domain):
    at_limit = "a" * (320 - len("@example.org")) + "@example.org"

    assert writer.put(_path(at_limit), {}, format="json").status_code == 200
    assert_api_error(writer.put(_path("a" + at_limit), {}, format="json"), 400, "ValidationError")


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ({"reason": "manual"}, "reason: unknown field"),
        ({"detail": 5}, "detail: must be a string"),
        ({"detail": "x" * 501}, "detail:"),
        ({"detail": None}, "detail:"),
        (["detail"], ""),
    ],
)
def test_bad_bodies_are_a_validation_error(writer, domain, body, problem):
    error = assert_api_error(writer.put(_path("a@example.org"), body, format="json"), 400, "ValidationError")

    assert problem in error["message"]
    assert not Suppression.objects.exists()


def test_a_detail_of_500_characters_is_taken(writer, domain):
    assert writer.put(_path("a@example.org"), {"detail": "x" * 500}, format="json").json()["detail"] == "x" * 500


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"reason": "bounce"}, "ValidationError"),
        ({"limit": "0"}, "ValidationError"),
        ({"limit": "101"}, "ValidationError"),
        ({"limit": "1.5"}, "ValidationError"),
        ({"email": "not an address"}, "ValidationError"),
        ({"email": "a\r\nb@example.org"}, "ValidationError"),
        ({"email": "a" * 2000 + "@example.org"}, "ValidationError"),
        ({"after": "forged"}, "InvalidCursor"),
        ({"direction": "sent"}, "ValidationError"),
    ],
)
def test_bad_query_parameters_are_refused(api, domain, params, code):
    assert_api_error(api.get("/v1/suppressions", params), 400, code)


def test_a_repeated_query_parameter_is_refused(api, domain):
    assert_api_error(api.get("/v1/suppressions?reason=manual&reason=complaint"), 400, "ValidationError")


def test_a_query_parameter_on_one_entry_is_refused(api, domain):
    assert_api_error(api.get(_path("a@example.org") + "?limit=1"), 400, "ValidationError")


def test_create_api_key_grants_suppressions_write(domain):
    out = StringIO()
    call_command(
        "create_api_key", domain.name, "--permission", "email.read", "--permission", "suppressions.write", stdout=out
    )

    secret = out.getvalue().splitlines()[-1]
    assert "email.read, suppressions.write" in out.getvalue()
    assert ApiKey.objects.get(prefix=secret.split("_")[1]).permissions == ["email.read", "suppressions.write"]
    writer = client_for(None)
    writer.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert writer.put(_path("a@example.org"), {}, format="json").status_code == 200


def test_put_of_an_address_whose_soft_bounce_entry_lapsed_suppresses_it_again(writer, domain):
    SuppressionFactory(
        domain=domain,
        address="full@example.org",
        reason=SuppressionReason.SOFT_BOUNCE,
        expires_at=timezone.now() - timedelta(minutes=1),
        source_message=MessageFactory(domain=domain),
    )

    response = writer.put(_path("full@example.org"), {"detail": "stop"}, format="json")

    body = response.json()
    assert (body["reason"], body["expires_at"], body["message_id"], body["detail"]) == ("manual", None, None, "stop")
    assert not Suppression.objects.get(domain=domain).expired

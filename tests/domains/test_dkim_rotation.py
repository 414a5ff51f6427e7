"""DKIM key rotation against a real DNS server on loopback: a new key signs only once its record is
found (or an operator forces it), the old one stays valid for the grace period, then it is deleted."""

import re
from datetime import timedelta

import dkim
import pytest
from django.contrib.auth.models import Group, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.utils import timezone

from domains.dns import dns_records
from domains.models import DkimKey, DkimKeyState, Domain
from domains.services import FIRST_DKIM_SELECTOR, dkim_retire_expired, dkim_rotate, domain_create
from messaging.models import Message
from tests.conftest import client_for
from tests.dns_server import dkimpy_dnsfunc, dns_server
from tests.factories import ApiKeyFactory, DomainFactory

pytestmark = pytest.mark.django_db

UNICODE_NAME = "bücher.example"
A_LABEL_NAME = "xn--bcher-kva.example"


@pytest.fixture
def dns(settings):
    settings.MAILSERVICE_DNS_TIMEOUT = 1.0
    settings.MAILSERVICE_DKIM_RETIRE_DAYS = 7
    with dns_server() as (zone, address):
        settings.MAILSERVICE_DNS_RESOLVER = address
        yield zone, dkimpy_dnsfunc(address)


@pytest.fixture
def outbox(settings, tmp_path):
    settings.EMAIL_URL = None
    settings.MAILSERVICE_OUTBOX_DIR = tmp_path
    return tmp_path


def publish(zone, domain: Domain, key: DkimKey) -> None:
    zone.publish_txt(f"{key.selector}._domainkey.{domain.name}", f"v=DKIM1; k=rsa; p={key.public_key}")


def send(domain: Domain, outbox, capture, subject: str) -> bytes:
    """A message through the API and in-process dispatch, as the relay would receive it."""
    api = client_for(ApiKeyFactory(domain=domain))
    with capture(execute=True):
        response = api.post(
            "/v1/send",
            {"from": f"shop@{domain.name}", "to": "bob@example.org", "subject": subject, "text": "Hello"},
            format="json",
        )
    assert response.status_code == 200, response.content
    return (outbox / f"{Message.objects.get(public_id=response.json()['id']).public_id}.eml").read_bytes()


def selector_of(data: bytes) -> str:
    header = data.split(b"\r\n\r\n", 1)[0].decode()
    return re.search(r"DKIM-Signature:.*?\bs=([^;]+);", header, re.S).group(1)


def _rotate_while_unpublished(domain, capsys) -> DkimKey:
    """`rotate_dkim` makes a pending key and prints its record; a check that does not find it keeps the old key."""
    call_command("rotate_dkim", UNICODE_NAME)

    new = domain.dkim_keys.get(state=DkimKeyState.PENDING)
    out = capsys.readouterr().out
    assert f"selector {new.selector} (pending)" in out
    assert f"{new.selector}._domainkey.{A_LABEL_NAME} TXT v=DKIM1; k=rsa; p={new.public_key}" in out
    assert new.selector != FIRST_DKIM_SELECTOR

    call_command("check_domain", UNICODE_NAME)
    assert "missing" in capsys.readouterr().out
    return new


def _check_switches(domain, new: DkimKey, old: DkimKey, capsys) -> None:
    """Once the record is found, the check makes the new key active and the old one retiring for 7 days."""
    call_command("check_domain", UNICODE_NAME)

    assert f"signing now uses selector {new.selector}" in capsys.readouterr().out
    new.refresh_from_db()
    old.refresh_from_db()
    assert (new.state, old.state, new.forced_by) == (DkimKeyState.ACTIVE, DkimKeyState.RETIRING, "")
    assert new.verified_at is not None
    assert abs(old.retire_after - (timezone.now() + timedelta(days=7))) < timedelta(minutes=1)


def _retire(domain, new: DkimKey, old: DkimKey) -> None:
    """The old key goes at the end of its grace period, not a minute before; its record leaves the list."""
    assert dkim_retire_expired(now=old.retire_after - timedelta(minutes=1)) == 0
    assert dkim_retire_expired(now=old.retire_after) == 1

    assert list(domain.dkim_keys.values_list("selector", flat=True)) == [new.selector]
    assert [record.name for record in dns_records(domain=domain) if "_domainkey" in record.name] == [
        f"{new.selector}._domainkey.{A_LABEL_NAME}"
    ]


def test_rotation_end_to_end_switches_only_once_the_record_is_found_and_retires_the_old_key(
    dns, outbox, django_capture_on_commit_callbacks, capsys
):
    zone, dnsfunc = dns
    domain = domain_create(name=UNICODE_NAME, verified=True)
    assert domain.name == A_LABEL_NAME
    old = domain.dkim_keys.get()
    publish(zone, domain, old)

    new = _rotate_while_unpublished(domain, capsys)
    before = send(domain, outbox, django_capture_on_commit_callbacks, "before the switch")
    assert selector_of(before) == FIRST_DKIM_SELECTOR
    assert domain.dkim_keys.get(state=DkimKeyState.ACTIVE) == old

    publish(zone, domain, new)
    _check_switches(domain, new, old, capsys)
    after = send(domain, outbox, django_capture_on_commit_callbacks, "after the switch")
    assert selector_of(after) == new.selector

    # During the grace period both records are published: mail signed before and after verifies.
    assert dkim.verify(before, dnsfunc=dnsfunc)
    assert dkim.verify(after, dnsfunc=dnsfunc)
    retiring = next(record for record in dns_records(domain=domain) if record.name.startswith("mail."))
    assert retiring.note == f"retiring: keep published until {old.retire_after:%Y-%m-%d %H:%M} UTC"

    _retire(domain, new, old)
    later = send(domain, outbox, django_capture_on_commit_callbacks, "after the grace period")
    assert selector_of(later) == new.selector
    assert dkim.verify(later, dnsfunc=dnsfunc)


def test_a_message_signed_with_a_key_whose_record_is_missing_would_not_verify(
    dns, outbox, django_capture_on_commit_callbacks
):
    """Why the pending key never signs before its record is found: receivers would fail the mail."""
    zone, dnsfunc = dns
    domain = DomainFactory(name="shop.example.com")
    publish(zone, domain, domain.dkim_keys.get())
    pending = dkim_rotate(domain=domain)

    data = send(domain, outbox, django_capture_on_commit_callbacks, "while pending")

    assert selector_of(data) == FIRST_DKIM_SELECTOR and dkim.verify(data, dnsfunc=dnsfunc)
    assert DkimKey.objects.get(pk=pending.pk).state == DkimKeyState.PENDING


def test_the_console_shows_the_pending_record_beside_the_active_one_and_check_dns_switches(dns, admin_client):
    zone, _ = dns
    domain = DomainFactory(name="console.example.com")
    pending = dkim_rotate(domain=domain)

    page = admin_client.get(f"/admin/domains/domain/{domain.pk}/change/").content.decode()

    assert page.index("<code>mail._domainkey.console.example.com</code>") < page.index(
        f"<code>{pending.selector}._domainkey.console.example.com</code>"
    )
    assert f'data-copy="v=DKIM1; k=rsa; p={pending.public_key}"' in page
    assert "publish this, then Check DNS" in page and 'id="dkim-force"' in page
    assert "selector mail" in page  # signing with

    publish(zone, domain, pending)
    result = admin_client.post(f"/admin/domains/domain/{domain.pk}/check-dns/").content.decode()

    assert f"signing now uses selector {pending.selector}" in result
    page = admin_client.get(f"/admin/domains/domain/{domain.pk}/change/").content.decode()
    assert "retiring: keep published until" in page and 'id="dkim-force"' not in page
    assert f"selector {pending.selector}" in page


def test_an_operator_can_force_the_switch_and_it_is_recorded(dns, admin_client, admin_user):
    domain = DomainFactory(name="forced.example.com")
    pending = dkim_rotate(domain=domain)

    response = admin_client.post(f"/admin/domains/domain/{domain.pk}/dkim-force/")

    assert response.status_code == 302
    pending.refresh_from_db()
    assert pending.state == DkimKeyState.ACTIVE and pending.verified_at is None
    assert pending.forced_by == admin_user.get_username() and pending.forced_at is not None
    assert domain.dkim_keys.get(selector=FIRST_DKIM_SELECTOR).state == DkimKeyState.RETIRING


def test_support_staff_cannot_force_a_key(dns):
    domain = DomainFactory(name="guarded.example.com")
    pending = dkim_rotate(domain=domain)
    user = User.objects.create_user("sam", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name="support"))
    client = Client()
    client.force_login(user)

    response = client.post(f"/admin/domains/domain/{domain.pk}/dkim-force/")

    assert response.status_code == 403
    assert DkimKey.objects.get(pk=pending.pk).state == DkimKeyState.PENDING


def test_a_second_rotation_waits_for_the_pending_key():
    DomainFactory(name="twice.example.com")
    call_command("rotate_dkim", "TWICE.example.com.")

    with pytest.raises(CommandError, match="twice.example.com already has a pending DKIM key"):
        call_command("rotate_dkim", "twice.example.com")


def test_rotating_an_unknown_domain_is_a_one_line_error():
    with pytest.raises(CommandError, match="No domain named nope.example.com"):
        call_command("rotate_dkim", "nope.example.com")


def test_selectors_are_dated_and_never_reused(dns, admin_client):
    domain = DomainFactory(name="often.example.com")
    selectors = []
    for _ in range(3):
        key = dkim_rotate(domain=domain)
        admin_client.post(f"/admin/domains/domain/{domain.pk}/dkim-force/")
        selectors.append(key.selector)

    today = f"ms{timezone.now():%Y%m%d}"
    assert selectors == [today, f"{today}-2", f"{today}-3"]


def test_retire_command_and_beat_schedule_delete_expired_keys(settings, capsys, admin_client):
    settings.MAILSERVICE_DKIM_RETIRE_DAYS = 0
    domain = DomainFactory(name="retire.example.com")
    dkim_rotate(domain=domain)
    admin_client.post(f"/admin/domains/domain/{domain.pk}/dkim-force/")

    call_command("retire_dkim_keys")

    assert "1 retired DKIM key(s) deleted" in capsys.readouterr().out
    assert list(domain.dkim_keys.values_list("state", flat=True)) == [DkimKeyState.ACTIVE]
    assert settings.CELERY_BEAT_SCHEDULE["dkim-retire"]["task"] == "domains.dkim_retire"

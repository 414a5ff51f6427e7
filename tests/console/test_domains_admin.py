"""Domains in the console: the list at a glance, the DNS records, verification and the sending switches."""

import html
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.utils import timezone

from domains.models import DailyUsage, DkimKeyState, Domain, SendingControl
from domains.services import sending_pause
from mailservice.encryption import decrypt_secret
from messaging.models import EventType, MessageEvent, Status
from messaging.outbound.fleet_limits import relay_slow_down
from tests.factories import DomainFactory, MessageFactory, _shared_dkim_key_pair

pytestmark = pytest.mark.django_db

LIST = "/admin/domains/domain/"


def row_of(html: str, name: str) -> str:
    match = re.search(rf"<tr[^>]*>(?:(?!</tr>).)*>{re.escape(name)}</a>(?:(?!</tr>).)*</tr>", html, re.S)
    assert match, f"no row for {name}"
    return match.group(0)


def test_the_list_shows_state_usage_against_the_allowance_and_rates(operator):
    busy = DomainFactory(name="busy.example.com", daily_allowance=500)
    DailyUsage.objects.create(domain=busy, day=timezone.now().date(), sent_count=42)
    DailyUsage.objects.create(domain=busy, day=timezone.now().date() - timedelta(days=1), sent_count=7)
    for status in [Status.DELIVERED] * 6 + [Status.BOUNCED] * 3 + [Status.COMPLAINED]:
        MessageFactory(domain=busy, status=status)
    stale = MessageFactory(domain=busy, status=Status.BOUNCED)
    stale.created_at = timezone.now() - timedelta(days=31)
    stale.save(update_fields=["created_at"])
    DomainFactory(name="fresh.example.com", verified=False)
    sending_pause(
        domain=DomainFactory(name="spammy.example.com"), actor="safeguard", reason="complaints", automatic=True
    )
    sending_pause(domain=DomainFactory(name="held.example.com"), actor="alice", reason="customer asked")

    html = operator.get(LIST).content.decode()

    busy_row = row_of(html, "busy.example.com")
    assert "42 / 500" in busy_row
    assert "30.0%" in busy_row and "10.0%" in busy_row  # 3 and 1 of the 10 recent sends
    assert "not verified" in row_of(html, "fresh.example.com")
    assert "0 / unlimited" in row_of(html, "fresh.example.com")
    assert "AUTO-PAUSED" in row_of(html, "spammy.example.com") and "complaints" in row_of(html, "spammy.example.com")
    held = row_of(html, "held.example.com")
    assert ">PAUSED<" in held and "by alice" in held and "customer asked" in held


def test_the_list_costs_the_same_queries_for_3_or_30_domains(operator, django_assert_num_queries):
    def load() -> None:
        assert operator.get(LIST).status_code == 200

    DomainFactory.create_batch(3)
    # session, user, count, the page (usage annotated), the page's rates, the global switch
    with django_assert_num_queries(6) as few:
        load()
    DomainFactory.create_batch(27)
    MessageFactory.create_batch(5, domain=Domain.objects.first())
    with django_assert_num_queries(len(few.captured_queries)):
        load()


def test_no_page_ever_shows_the_dkim_private_key(operator):
    domain = DomainFactory(name="keyed.example.com")
    marker = _shared_dkim_key_pair()[0].splitlines()[1]

    for url in (LIST, f"{LIST}{domain.pk}/change/", f"{LIST}add/", f"{LIST}?q=keyed"):
        response = operator.get(url)
        assert response.status_code == 200
        assert marker.encode() not in response.content
        assert b"PRIVATE KEY" not in response.content


def test_adding_a_domain_normalises_it_and_makes_a_dkim_key(operator):
    response = operator.post(f"{LIST}add/", {"name": "  News.Example.COM. "})

    assert response.status_code == 302
    domain = Domain.objects.get(name="news.example.com")
    key = domain.dkim_keys.get()
    assert (key.selector, key.state) == ("mail", DkimKeyState.ACTIVE)
    assert decrypt_secret(key.private_key).startswith("-----BEGIN PRIVATE KEY-----")
    assert "PRIVATE KEY" not in key.private_key
    assert key.public_key and not domain.verified


@pytest.mark.parametrize("name", ["not a domain", "localhost", "bad_label.example.com"])
def test_adding_an_invalid_domain_shows_a_form_error(operator, name):
    response = operator.post(f"{LIST}add/", {"name": name})

    assert response.status_code == 200
    assert b"is not a valid domain name" in response.content
    assert not Domain.objects.exists()


def test_adding_a_domain_twice_is_a_form_error(operator):
    DomainFactory(name="dup.example.com")

    response = operator.post(f"{LIST}add/", {"name": "DUP.example.com"})

    assert response.status_code == 200
    assert b"already exists" in response.content


def test_the_change_page_lists_the_records_to_publish(operator, settings):
    settings.MAILSERVICE_SPF_INCLUDE = "spf.mailservice.test"
    settings.MAILSERVICE_INBOUND_HOST = "mx.mailservice.test"
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.mailservice.test"
    domain = DomainFactory(name="records.example.com")

    html = operator.get(f"{LIST}{domain.pk}/change/").content.decode()

    assert f'data-copy="mailservice-verification={domain.verification_token}"' in html
    assert "<code>_mailservice.records.example.com</code>" in html
    assert 'data-copy="v=spf1 include:spf.mailservice.test ~all"' in html
    assert "<code>mail._domainkey.records.example.com</code>" in html
    assert f'data-copy="v=DKIM1; k=rsa; p={_shared_dkim_key_pair()[1]}"' in html
    assert "<code>bounces.mailservice.test</code>" in html and 'data-copy="10 mx.mailservice.test."' in html
    assert "Not shown until configured" not in html


def test_the_change_page_shows_refusals_for_the_sender_with_links_to_their_messages(operator, domain):
    page = f"{LIST}{domain.pk}/change/"
    assert "None of 0 messages sent." in operator.get(page).content.decode()
    for reason in ("blocked", "authentication", "user_unknown"):
        message = MessageFactory(domain=domain, status=Status.BOUNCED)
        MessageEvent.objects.create(message=message, type=EventType.BOUNCED, recipient="a@example.org", reason=reason)

    html = operator.get(page).content.decode()

    section = html[html.index('id="sender-refusals"') :]
    assert "2 of 3 messages sent:" in section
    link = f"/admin/messaging/message/?domain__id__exact={domain.pk}&amp;reason=blocked"
    assert f'<a href="{link}" data-reason="blocked">blocked: 1</a>' in section
    assert 'data-reason="user_unknown"' not in section  # the recipient's own: suppressed, not the sender's


def test_the_change_page_names_the_settings_that_would_add_records(operator, settings):
    settings.MAILSERVICE_SPF_INCLUDE = None
    settings.MAILSERVICE_INBOUND_HOST = None
    domain = DomainFactory()

    html = operator.get(f"{LIST}{domain.pk}/change/").content.decode()

    assert "Not shown until configured: MAILSERVICE_SPF_INCLUDE, MAILSERVICE_INBOUND_HOST" in html


def test_mark_verified_records_the_operator_and_the_time(operator):
    domain = DomainFactory(verified=False)

    response = operator.post(f"{LIST}{domain.pk}/mark-verified/")

    assert response.status_code == 302
    domain.refresh_from_db()
    assert domain.verified and domain.verified_by == "admin (operator override)"
    assert timezone.now() - domain.verified_at < timedelta(seconds=10)
    assert LogEntry.objects.filter(object_id=str(domain.pk), change_message__contains="operator override").exists()


def test_mark_verified_as_a_list_action(operator):
    domains = DomainFactory.create_batch(2, verified=False)

    operator.post(LIST, {"action": "mark_verified", "_selected_action": [d.pk for d in domains]})

    assert Domain.objects.filter(verified=True, verified_by="admin (operator override)").count() == 2


def test_mark_verified_refuses_a_get(operator):
    domain = DomainFactory(verified=False)

    assert operator.get(f"{LIST}{domain.pk}/mark-verified/").status_code == 403
    domain.refresh_from_db()
    assert not domain.verified


def test_the_allowance_and_the_dispatch_weight_are_editable(operator, domain):
    response = operator.post(f"{LIST}{domain.pk}/change/", {"daily_allowance": "250", "dispatch_weight": "3"})

    assert response.status_code == 302
    domain.refresh_from_db()
    assert (domain.daily_allowance, domain.dispatch_weight) == (250, 3)


@pytest.mark.parametrize("weight", ["0", "101", ""])
def test_a_dispatch_weight_out_of_range_is_a_form_error(operator, domain, weight):
    response = operator.post(f"{LIST}{domain.pk}/change/", {"daily_allowance": "", "dispatch_weight": weight})

    assert response.status_code == 200
    assert b"errorlist" in response.content


def test_the_list_shows_the_relay_rate_in_force_and_why(operator, settings):
    settings.MAILSERVICE_RELAY_RATE = 40.0
    assert "Relay rate: 40.0 messages/s." in operator.get(LIST).content.decode()

    relay_slow_down(reply="421 4.7.0 Too many connections")

    banner = re.search(r'<small id="relay-rate">(.*?)</small>', operator.get(LIST).content.decode()).group(1)
    assert "Relay rate: 2" in banner and "configured 40.0 messages/s" in banner
    assert "421 4.7.0 Too many connections" in banner


@pytest.mark.parametrize(
    ("email_url", "shown"),
    [
        (None, "Delivery: file outbox"),
        ("smtp://user:secret@relay.example.com:587", "Delivery: through the relay relay.example.com:587"),
        ("mx://", "Delivery: direct to the recipients' MX hosts (mx://, port 25)"),
    ],
)
def test_the_list_says_which_delivery_mode_is_in_force(operator, settings, email_url, shown):
    settings.EMAIL_URL, settings.MAILSERVICE_MX_PORT = email_url, 25
    banner = html.unescape(re.search(r'<small id="relay-rate">(.*?)</small>', operator.get(LIST).content.decode())[1])
    assert shown in banner and "secret" not in banner


def test_a_negative_allowance_is_a_form_error(operator, domain):
    response = operator.post(f"{LIST}{domain.pk}/change/", {"daily_allowance": "-1", "dispatch_weight": "1"})

    assert response.status_code == 200
    assert b"errorlist" in response.content


@pytest.mark.parametrize(("entered", "kept"), [("7", 7), ("", None)])
def test_the_retention_is_editable_and_empty_means_the_default(operator, domain, entered, kept):
    domain.retention_days = 90
    domain.save()
    response = operator.post(f"{LIST}{domain.pk}/change/", {"retention_days": entered, "dispatch_weight": "1"})

    assert response.status_code == 302
    domain.refresh_from_db()
    assert domain.retention_days == kept


def test_a_retention_under_one_day_is_a_form_error(operator, domain):
    response = operator.post(f"{LIST}{domain.pk}/change/", {"retention_days": "0"})

    assert response.status_code == 200
    assert b"errorlist" in response.content


def test_pausing_a_domain_asks_for_a_reason_and_records_who(operator, domain):
    url = f"{LIST}{domain.pk}/pause/"
    assert b'name="reason"' in operator.get(url).content

    refused = operator.post(url, {"reason": ""})
    assert refused.status_code == 200 and b"This field is required" in refused.content

    operator.post(url, {"reason": "bounce storm"})
    domain.refresh_from_db()
    assert (domain.sending_paused, domain.auto_paused, domain.paused_by, domain.pause_reason) == (
        True,
        False,
        "admin",
        "bounce storm",
    )
    page = operator.get(f"{LIST}{domain.pk}/change/").content.decode()
    assert "PAUSED" in page and "by admin" in page and "bounce storm" in page


def test_an_operator_resumes_an_auto_paused_domain(operator, domain):
    sending_pause(domain=domain, actor="safeguard", reason="bounce rate 12%", automatic=True)

    assert b"automatic safeguard" in operator.get(f"{LIST}{domain.pk}/resume/").content
    operator.post(f"{LIST}{domain.pk}/resume/")

    domain.refresh_from_db()
    assert not domain.sending_paused and not domain.auto_paused


def test_the_global_switch_is_on_the_domain_list(operator):
    assert b"All sending is on." in operator.get(LIST).content

    operator.post(f"{LIST}sending/pause/", {"reason": "provider incident"})
    control = SendingControl.objects.get(pk=1)
    assert (control.paused, control.paused_by, control.pause_reason) == (True, "admin", "provider incident")
    html = operator.get(LIST).content.decode()
    assert "All sending is PAUSED" in html and "provider incident" in html

    operator.post(f"{LIST}sending/resume/")
    assert not SendingControl.objects.get(pk=1).paused


def test_a_global_pause_shows_on_every_domain_row(operator, domain):
    assert "● on" in operator.get(LIST).content.decode()

    sending_pause(domain=None, actor="admin", reason="provider incident")

    html = operator.get(LIST).content.decode()
    assert "● on" not in html and "■ held" in html and "all sending is paused" in html


def test_a_domain_with_messages_cannot_be_deleted_and_the_page_says_why(operator, domain):
    MessageFactory(domain=domain)

    response = operator.get(f"{LIST}{domain.pk}/delete/")

    assert response.status_code == 403
    assert b"has sent or received messages" in response.content and b"permission" not in response.content
    assert Domain.objects.filter(pk=domain.pk).exists()


def test_a_domain_without_messages_can_be_deleted(operator, domain):
    operator.post(f"{LIST}{domain.pk}/delete/", {"post": "yes"})

    assert not Domain.objects.filter(pk=domain.pk).exists()


def test_list_dates_have_seconds_and_the_time_zone(operator, domain):
    Domain.objects.filter(pk=domain.pk).update(verified_by="ops", verified_at=timezone.now())

    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", operator.get(LIST).content.decode())

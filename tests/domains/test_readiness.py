"""The readiness check against a real DNS server on loopback: a domain that passes, and one that fails
each check (SPF, its lookup limits, DKIM, DMARC, alignment, PTR, DMARC reports, complaint rate)."""

import io
import json
from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from domains.dns import dkim_record
from domains.models import DkimKeyState, DomainReadiness
from messaging.models import CountedEvent, DailyStatusCount, EventType, MessageEvent
from messaging.readiness.check import (
    complaint_rate_check,
    domain_readiness,
    sender_refusals_check,
    source_addresses,
)
from messaging.tasks import readiness_check_task
from tests.dns_server import dns_server
from tests.factories import DomainFactory, MessageFactory

pytestmark = pytest.mark.django_db

RETURN_PATH = "bounces.mailservice.test"
RELAY_SPF = "spf.relay.test"
REPORTS = f"dmarc-reports@{RETURN_PATH}"
IDS = ["spf", "spf_lookups", "dkim", "dmarc", "alignment", "ptr", "dmarc_reports", "complaint_rate", "sender_refusals"]


@pytest.fixture(scope="module")
def served():
    """One server for the module (stopping one takes a second); each test empties its zone."""
    with dns_server() as (zone, address):
        yield zone, address


@pytest.fixture
def zone(served, settings):
    zone, address = served
    zone.records.clear()
    settings.MAILSERVICE_DNS_RESOLVER = address
    settings.MAILSERVICE_SPF_INCLUDE = RELAY_SPF
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = RETURN_PATH
    settings.MAILSERVICE_DNS_TIMEOUT = 0.5
    settings.EMAIL_URL = "smtp://relay.test:587"
    zone.publish_txt(RELAY_SPF, "v=spf1 ip4:203.0.113.0/24 ip4:198.51.100.7 ip6:2001:db8::/32 ~all")
    return zone


@pytest.fixture
def domain(zone):
    """A domain whose records are all published: it passes every check it can."""
    domain = DomainFactory(name="ready.example.com")
    zone.publish_txt(RETURN_PATH, f"v=spf1 include:{RELAY_SPF} -all")
    key = domain.dkim_keys.get(state=DkimKeyState.ACTIVE)
    record = dkim_record(domain=domain, key=key)
    zone.publish_txt(record.name, record.value)
    zone.publish_txt("_dmarc.ready.example.com", f"v=DMARC1; p=reject; rua=mailto:{REPORTS}")
    zone.publish_txt(f"ready.example.com._report._dmarc.{RETURN_PATH}", "v=DMARC1")
    return domain


def results(domain) -> dict[str, tuple[str, str]]:
    return {check.id: (check.status, check.detail) for check in domain_readiness(domain=domain).checks}


def status(domain, check_id: str) -> str:
    return results(domain)[check_id][0]


def test_a_ready_domain_passes_and_json_has_the_issues_shape(domain):
    out = io.StringIO()
    call_command("check_readiness", "Ready.Example.com", "--json", stdout=out)

    report = json.loads(out.getvalue())
    assert list(report) == ["domain", "checks"]
    assert report["domain"] == "ready.example.com"
    assert [check["id"] for check in report["checks"]] == IDS
    assert all(list(check) == ["id", "status", "detail"] for check in report["checks"])
    statuses = {check["id"]: check["status"] for check in report["checks"]}
    # The return path is the service's own domain: DMARC passes on DKIM alone, which is a warning.
    assert statuses == {
        "spf": "pass",
        "spf_lookups": "pass",
        "dkim": "pass",
        "dmarc": "pass",
        "alignment": "warn",
        "ptr": "skip",
        "dmarc_reports": "pass",
        "complaint_rate": "skip",
        "sender_refusals": "skip",
    }
    stored = DomainReadiness.objects.get(domain=domain)
    assert stored.checks == report["checks"]


def test_unknown_domain_is_a_one_line_error(zone):
    with pytest.raises(CommandError, match=r"^No domain named nowhere\.example$"):
        call_command("check_readiness", "nowhere.example")


def test_the_text_output_lists_each_check(domain):
    out = io.StringIO()
    call_command("check_readiness", "ready.example.com", stdout=out)
    lines = out.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == IDS
    assert lines[0].startswith("pass  spf ")


@pytest.mark.parametrize(
    ("record", "extra", "expected"),
    [
        (f"v=spf1 redirect=_spf.{RETURN_PATH}", {f"_spf.{RETURN_PATH}": f"v=spf1 include:{RELAY_SPF} -all"}, "pass"),
        ("v=spf1 include:_spf.other.test -all", {"_spf.other.test": "v=spf1 ip4:203.0.113.0/24 -all"}, "fail"),
        ("v=spf1 ip4:192.0.2.0/24 ~all", {}, "fail"),
        (None, {}, "fail"),
    ],
    ids=["redirect-to-include", "include-misses-an-address", "relay-not-listed", "no-record"],
)
def test_spf_evaluates_the_relays_addresses(zone, record, extra, expected):
    domain = DomainFactory(name="spf.example.com")
    if record:
        zone.publish_txt(RETURN_PATH, record)
    for name, value in extra.items():
        zone.publish_txt(name, value)
    verdict, detail = results(domain)["spf"]
    assert verdict == expected, detail
    if record and "other" in record:
        assert "198.51.100.7 fail" in detail and "203.0.113.0 " not in detail


@pytest.mark.parametrize(
    ("hosts", "void", "expected"),
    [(9, 0, "pass"), (10, 0, "fail"), (1, 2, "pass"), (1, 3, "fail")],
    ids=["10-lookups", "11-lookups", "2-void", "3-void"],
)
def test_spf_lookup_limits(zone, hosts, void, expected):
    """include: counts one lookup, each a: one more; a: names with no address are void lookups."""
    domain = DomainFactory(name="lookups.example.com")
    terms = [f"include:{RELAY_SPF}"]
    for n in range(hosts):
        zone.publish_address(f"host{n}.{RETURN_PATH}", "192.0.2.200")
        terms.append(f"a:host{n}.{RETURN_PATH}")
    terms += [f"a:void{n}.{RETURN_PATH}" for n in range(void)]
    zone.publish_txt(RETURN_PATH, f"v=spf1 {' '.join(terms)} -all")

    verdict, detail = results(domain)["spf_lookups"]

    assert verdict == expected, detail
    if void == 3:
        assert "more than 2 void lookups" in detail
    else:
        assert f"{1 + hosts + void} DNS-querying terms" in detail


def test_dkim_missing_or_another_key_fails(zone, domain):
    zone.records.pop(("mail._domainkey.ready.example.com", "TXT"))
    verdict, detail = results(domain)["dkim"]
    assert verdict == "fail" and "has no record: publish v=DKIM1" in detail

    zone.publish_txt(
        "mail._domainkey.ready.example.com", "v=DKIM1; k=rsa; p=MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA"
    )
    verdict, detail = results(domain)["dkim"]
    assert verdict == "fail" and "publishes another key" in detail


@pytest.mark.parametrize(
    ("name", "records", "expected", "words"),
    [
        ("ready.example.com", {}, "fail", "no DMARC record at _dmarc.ready.example.com or _dmarc.example.com"),
        ("ready.example.com", {"_dmarc.ready.example.com": "v=DMARC1; p=none"}, "warn", "policy none"),
        ("ready.example.com", {"_dmarc.ready.example.com": "v=DMARC1; p=quarantine"}, "pass", "policy quarantine"),
        ("mail.example.co.uk", {"_dmarc.example.co.uk": "v=DMARC1; p=none; sp=reject"}, "pass", "organisational"),
        ("mail.example.co.uk", {"_dmarc.co.uk": "v=DMARC1; p=reject"}, "fail", "no DMARC record"),
        ("ready.example.com", {"_dmarc.ready.example.com": "v=DMARC1; p=nonsense"}, "fail", "p= must be"),
    ],
    ids=["none", "p=none", "quarantine", "org-domain-sp", "public-suffix-ignored", "bad-policy"],
)
def test_dmarc(zone, name, records, expected, words):
    domain = DomainFactory(name=name)
    for record_name, value in records.items():
        zone.publish_txt(record_name, value)
    verdict, detail = results(domain)["dmarc"]
    assert verdict == expected and words in detail, detail


def test_alignment_passes_when_the_return_path_is_under_the_domain(zone, domain, settings):
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.ready.example.com"
    verdict, detail = results(domain)["alignment"]
    assert verdict == "pass", detail
    assert "DKIM d=ready.example.com aligns" in detail

    zone.records[("_dmarc.ready.example.com", "TXT")].clear()
    zone.publish_txt("_dmarc.ready.example.com", "v=DMARC1; p=reject; aspf=s")
    verdict, detail = results(domain)["alignment"]
    assert verdict == "warn" and "does not align (aspf=s)" in detail


def test_a_third_party_rua_needs_its_authorisation_record(zone, domain):
    zone.records.pop((f"ready.example.com._report._dmarc.{RETURN_PATH}", "TXT"))
    verdict, detail = results(domain)["dmarc_reports"]
    assert verdict == "warn"
    assert f'publish ready.example.com._report._dmarc.{RETURN_PATH} TXT "v=DMARC1"' in detail


def test_a_rua_without_the_service_says_what_to_set(zone, domain):
    zone.records[("_dmarc.ready.example.com", "TXT")].clear()
    zone.publish_txt("_dmarc.ready.example.com", "v=DMARC1; p=reject; rua=mailto:agg@ready.example.com!10m")
    verdict, detail = results(domain)["dmarc_reports"]
    assert verdict == "warn"
    assert f"set rua=mailto:agg@ready.example.com,mailto:{REPORTS}" in detail


@pytest.fixture
def direct(zone, domain, settings):
    """Direct delivery from two loopback addresses; only the first has a PTR that matches its HELO name."""
    settings.EMAIL_URL = "mx://"
    settings.MAILSERVICE_SOURCE_ADDRESSES = {"127.0.0.2": "out1.mailservice.test", "127.0.0.3": "out2.mailservice.test"}
    zone.publish_ptr("127.0.0.2", "out1.mailservice.test")
    zone.publish_address("out1.mailservice.test", "127.0.0.2")
    zone.publish_ptr("127.0.0.3", "host-3.isp.test")
    zone.publish_address("out2.mailservice.test", "127.0.0.3")
    zone.records.pop((RETURN_PATH, "TXT"), None)
    zone.publish_txt(RETURN_PATH, "v=spf1 ip4:127.0.0.2 -all")
    return settings


def test_direct_delivery_checks_each_source_address(direct, domain):
    """127.0.0.3's PTR names another host, and the SPF record lists only 127.0.0.2."""
    checks = results(domain)

    assert checks["ptr"][0] == "fail"
    assert checks["ptr"][1] == "127.0.0.3 has PTR host-3.isp.test, not its HELO name out2.mailservice.test"
    assert checks["spf"][0] == "fail"
    assert "127.0.0.3 fail" in checks["spf"][1] and "127.0.0.2 pass" not in checks["spf"][1]


def test_direct_delivery_passes_with_matching_reverse_dns(direct, domain, zone):
    zone.records[("3.0.0.127.in-addr.arpa", "PTR")].clear()
    zone.publish_ptr("127.0.0.3", "out2.mailservice.test")
    zone.records[(RETURN_PATH, "TXT")].clear()
    zone.publish_txt(RETURN_PATH, "v=spf1 ip4:127.0.0.2 ip4:127.0.0.3 -all")
    checks = results(domain)
    assert checks["ptr"][0] == "pass", checks["ptr"]
    assert checks["spf"][0] == "pass", checks["spf"]


def test_a_ptr_that_does_not_resolve_back_fails(direct, domain, zone):
    zone.records[("out1.mailservice.test", "A")].clear()
    assert "out1.mailservice.test (the PTR of 127.0.0.2) does not resolve back" in results(domain)["ptr"][1]


def test_a_source_address_without_its_own_helo_name_gives_the_service_s(settings):
    settings.MAILSERVICE_HELO_NAME = "helo.mailservice.test"
    settings.MAILSERVICE_SOURCE_ADDRESSES = {"192.0.2.1": "a.test", "2001:db8::1": ""}
    parsed = source_addresses()
    assert [(s.address, s.helo) for s in parsed] == [("192.0.2.1", "a.test"), ("2001:db8::1", "helo.mailservice.test")]


@pytest.mark.parametrize(("complained", "expected"), [(0, "pass"), (1, "pass"), (2, "warn"), (3, "fail")])
def test_complaint_rate_is_the_worst_day_of_seven(complained, expected):
    """1 000 sent a day: 1 complaint is 0.1 % (the target, not above it), 3 is the 0.3 % ceiling."""
    domain = DomainFactory()
    today = timezone.now().date()
    for days_ago, complaints in ((1, complained), (3, 0), (8, 50)):  # 8 days ago is outside the window
        day = today - timedelta(days=days_ago)
        DailyStatusCount.objects.create(domain=domain, day=day, kind=CountedEvent.SENT, count=1000)
        DailyStatusCount.objects.create(domain=domain, day=day, kind=CountedEvent.COMPLAINED, count=complaints)
    check = complaint_rate_check(domain=domain, today=today)
    assert check.status == expected, check.detail
    assert f"({complained} complaints / 1000 sent)" in check.detail


def test_the_complaint_rate_counts_sends_no_dashboard_view_has_rolled_up(domain):
    """Without beat (the embedded mode) only the dashboard rolled the counts up: the check said "nothing sent"."""
    for _ in range(3):
        event = MessageEvent.objects.create(message_id=MessageFactory(domain=domain).pk, type=EventType.ACCEPTED)
        MessageEvent.objects.filter(pk=event.pk).update(created_at=timezone.now() - timedelta(minutes=5))

    check = {c.id: c for c in domain_readiness(domain=domain).checks}["complaint_rate"]

    assert check.status == "pass" and "(0 complaints / 3 sent)" in check.detail, check.detail


def _refused(domain, *reasons: str, event_type: str = EventType.RECIPIENT_REJECTED) -> None:
    message = MessageFactory(domain=domain, status="delivered")
    for reason in reasons:
        MessageEvent.objects.create(message_id=message.pk, type=event_type, recipient="a@example.org", reason=reason)


def test_refusals_for_the_sender_warn_with_their_counts_and_the_recipients_own_do_not(domain):
    assert sender_refusals_check(domain=domain).status == "skip"
    _refused(domain, "user_unknown")
    _refused(domain, "mailbox_full")
    assert sender_refusals_check(domain=domain).status == "pass"

    _refused(domain, "blocked", "blocked")  # the RCPT refusal and the bounce it led to: one message
    _refused(domain, "blocked")
    _refused(domain, "authentication")
    _refused(domain, "rate_limited", event_type=EventType.HELD)  # the service's own put-back: not counted
    _refused(domain, "spam_detected", event_type=EventType.HELD)

    check = sender_refusals_check(domain=domain)
    assert check.status == "warn"
    assert check.detail == "3 of 7 messages of the last 7 days refused for the sender: authentication 1, blocked 2"


def test_the_console_page_shows_the_last_check_escaped(zone, domain, client):
    client.force_login(User.objects.create_superuser("ops", password="pw"))
    page = reverse("admin:domains_domain_change", args=[domain.pk])
    assert "Not checked yet" in client.get(page).content.decode()

    response = client.post(reverse("admin:domains_domain_check_readiness", args=[domain.pk]))
    assert response.status_code == 302
    html = client.get(page).content.decode()
    assert 'data-check="dmarc_reports"' in html and "reports go to dmarc-reports@" in html

    DomainReadiness.objects.filter(domain=domain).update(
        checks=[{"id": "dmarc", "status": "fail", "detail": "<script>alert(1)</script>"}]
    )
    html = client.get(page).content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html


def test_the_daily_task_checks_every_domain(domain):
    other = DomainFactory(name="other.example.com")
    assert django_settings.CELERY_BEAT_SCHEDULE["readiness-daily"]["task"] == "messaging.readiness_check"
    assert readiness_check_task() == 2
    assert DomainReadiness.objects.get(domain=other).checks[3] == {
        "id": "dmarc",
        "status": "fail",
        "detail": "no DMARC record at _dmarc.other.example.com or _dmarc.example.com",
    }

"""The DNS check against a real DNS server on loopback: missing, wrong and correct records, and a timeout."""

import subprocess
import time

import pytest
from django.core.management import CommandError, call_command

from domains.dns import DNS_CHECK_ACTOR, DnsOutcome, Purpose, dns_records, domain_check_dns
from tests.dns_server import dns_server, unanswering_dns_server
from tests.factories import DomainFactory, _shared_dkim_key_pair
from tests.harness import BIN, ROOT, child_env

pytestmark = pytest.mark.django_db


@pytest.fixture
def dns_settings(settings):
    settings.MAILSERVICE_SPF_INCLUDE = "spf.mailservice.test"
    settings.MAILSERVICE_INBOUND_HOST = "mx.mailservice.test"
    settings.MAILSERVICE_RETURN_PATH_DOMAIN = "bounces.mailservice.test"
    settings.MAILSERVICE_DNS_TIMEOUT = 0.5
    return settings


@pytest.fixture
def zone(dns_settings):
    with dns_server() as (zone, address):
        dns_settings.MAILSERVICE_DNS_RESOLVER = address
        yield zone


@pytest.fixture
def unverified():
    return DomainFactory(name="fresh.example.com", verified=False)


def publish_all(zone, domain) -> None:
    for record in dns_records(domain=domain):
        if record.type == "TXT":
            zone.publish_txt(record.name, record.value)
        else:
            zone.publish_mx(record.name, record.value.split()[1])


def outcomes(result) -> dict[Purpose, DnsOutcome]:
    return {check.record.purpose: check.outcome for check in result.checks}


def test_the_records_to_publish(dns_settings, unverified):
    records = {record.purpose: (record.name, record.type, record.value) for record in dns_records(domain=unverified)}

    assert records == {
        Purpose.VERIFICATION: (
            "_mailservice.fresh.example.com",
            "TXT",
            f"mailservice-verification={unverified.verification_token}",
        ),
        Purpose.SPF: ("fresh.example.com", "TXT", "v=spf1 include:spf.mailservice.test ~all"),
        Purpose.DKIM: ("mail._domainkey.fresh.example.com", "TXT", f"v=DKIM1; k=rsa; p={_shared_dkim_key_pair()[1]}"),
        Purpose.RETURN_PATH: ("bounces.mailservice.test", "MX", "10 mx.mailservice.test."),
    }


def test_without_a_return_path_domain_bounces_come_back_to_the_sending_domain(dns_settings, unverified):
    dns_settings.MAILSERVICE_RETURN_PATH_DOMAIN = None

    mx = [record for record in dns_records(domain=unverified) if record.type == "MX"]

    assert [(record.name, record.value) for record in mx] == [("fresh.example.com", "10 mx.mailservice.test.")]


def test_nothing_published_is_missing_everywhere_and_leaves_the_domain_unverified(zone, unverified):
    result = domain_check_dns(domain=unverified)

    assert set(outcomes(result).values()) == {DnsOutcome.MISSING}
    unverified.refresh_from_db()
    assert not unverified.verified and not result.verified_now


def test_every_record_published_is_found_and_verifies_the_domain(zone, unverified):
    publish_all(zone, unverified)

    result = domain_check_dns(domain=unverified)

    assert set(outcomes(result).values()) == {DnsOutcome.FOUND}
    assert result.verified_now
    unverified.refresh_from_db()
    assert (unverified.verified, unverified.verified_by) == (True, DNS_CHECK_ACTOR)
    assert unverified.verified_at is not None


def test_wrong_values_are_reported_with_what_is_published(zone, unverified):
    zone.publish_txt("_mailservice.fresh.example.com", "mailservice-verification=not-the-token")
    zone.publish_txt("fresh.example.com", "v=spf1 include:someone-else.example ~all")
    zone.publish_txt("fresh.example.com", "google-site-verification=unrelated")
    zone.publish_txt("mail._domainkey.fresh.example.com", "v=DKIM1; k=rsa; p=AAAAold")
    zone.publish_mx("bounces.mailservice.test", "mx.elsewhere.test")

    result = domain_check_dns(domain=unverified)

    assert set(outcomes(result).values()) == {DnsOutcome.WRONG}
    verification = result.checks[0]
    assert verification.seen == ("mailservice-verification=not-the-token",)
    unverified.refresh_from_db()
    assert not unverified.verified


def test_an_unrelated_txt_record_at_the_name_counts_as_missing(zone, unverified):
    zone.publish_txt("fresh.example.com", "google-site-verification=unrelated")

    assert outcomes(domain_check_dns(domain=unverified))[Purpose.SPF] is DnsOutcome.MISSING


def test_the_verification_record_alone_verifies(zone, unverified):
    zone.publish_txt("_mailservice.fresh.example.com", f"mailservice-verification={unverified.verification_token}")

    result = domain_check_dns(domain=unverified)

    assert outcomes(result)[Purpose.VERIFICATION] is DnsOutcome.FOUND
    assert outcomes(result)[Purpose.DKIM] is DnsOutcome.MISSING
    unverified.refresh_from_db()
    assert unverified.verified


def test_a_resolver_that_never_answers_times_out_per_record(dns_settings, unverified):
    with unanswering_dns_server() as address:
        dns_settings.MAILSERVICE_DNS_RESOLVER = address
        started = time.monotonic()
        result = domain_check_dns(domain=unverified)
        elapsed = time.monotonic() - started

    assert set(outcomes(result).values()) == {DnsOutcome.UNANSWERED}
    assert elapsed < 4 * 0.5 + 1.5  # four records, each bounded by the 0.5 s timeout
    unverified.refresh_from_db()
    assert not unverified.verified


def test_check_domain_command_prints_each_record_and_verifies(zone, unverified, capsys):
    publish_all(zone, unverified)

    call_command("check_domain", "Fresh.Example.com")

    out = capsys.readouterr().out
    assert out.count("found") == 4
    assert "fresh.example.com is now verified" in out


def test_check_domain_command_shows_the_wrong_value(zone, unverified, capsys):
    zone.publish_txt("_mailservice.fresh.example.com", "mailservice-verification=stale")

    with pytest.raises(CommandError, match="fresh.example.com is not verified") as failure:
        call_command("check_domain", "fresh.example.com")

    assert failure.value.returncode == 2
    out = capsys.readouterr().out
    assert "wrong value" in out and "(published: mailservice-verification=stale)" in out


def test_check_domain_command_rejects_an_unknown_domain(zone):
    with pytest.raises(CommandError, match="No domain named nope.example.com"):
        call_command("check_domain", "nope.example.com")


@pytest.mark.live
def test_check_domain_from_the_shell_exits_non_zero_with_one_line_on_bad_input():
    result = subprocess.run(
        [str(BIN / "python"), "manage.py", "check_domain", "nope.example.com"],
        cwd=ROOT,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    assert result.stderr.strip() == "CommandError: No domain named nope.example.com"


@pytest.mark.parametrize("resolver", ["127.0.0.1:notaport", "127.0.0.1:0", "127.0.0.1:70000"])
def test_check_domain_command_rejects_a_bad_resolver_setting(dns_settings, unverified, resolver):
    dns_settings.MAILSERVICE_DNS_RESOLVER = resolver

    with pytest.raises(CommandError, match="MAILSERVICE_DNS_RESOLVER must be host or host:port"):
        call_command("check_domain", "fresh.example.com")


def test_the_console_check_dns_button_shows_each_record_and_verifies(zone, unverified, admin_client):
    zone.publish_txt("_mailservice.fresh.example.com", f"mailservice-verification={unverified.verification_token}")
    zone.publish_txt("fresh.example.com", "v=spf1 include:other.example ~all")

    page = admin_client.post(f"/admin/domains/domain/{unverified.pk}/check-dns/").content.decode()

    assert "verified now by this check" in page
    assert page.count('class="dns-found"') == 1 and page.count('class="dns-wrong"') == 1
    assert page.count('class="dns-missing"') == 2
    unverified.refresh_from_db()
    assert unverified.verified_by == DNS_CHECK_ACTOR


def test_the_console_check_dns_action_reports_a_silent_resolver(dns_settings, unverified, admin_client):
    with unanswering_dns_server() as address:
        dns_settings.MAILSERVICE_DNS_RESOLVER = address
        page = admin_client.post(
            "/admin/domains/domain/", {"action": "check_dns", "_selected_action": [unverified.pk]}
        ).content.decode()

    assert page.count('class="dns-unanswered"') == 4 and "no answer (timeout)" in page


def test_a_cname_loop_or_an_oversized_txt_record_gives_a_bounded_outcome(zone, unverified):
    zone.publish_cname("_mailservice.fresh.example.com", "loop.fresh.example.com")
    zone.publish_cname("loop.fresh.example.com", "_mailservice.fresh.example.com")
    zone.publish_txt("fresh.example.com", "v=spf1 " + "a" * 60_000)  # near a DNS message's 64 KiB

    started = time.monotonic()
    result = domain_check_dns(domain=unverified)

    assert time.monotonic() - started < 5
    assert outcomes(result)[Purpose.VERIFICATION] is DnsOutcome.UNANSWERED
    assert outcomes(result)[Purpose.SPF] is DnsOutcome.WRONG

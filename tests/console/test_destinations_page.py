"""The console's Destinations page: each destination with its MX hosts, connections, rate in force and
why, and last error (direct delivery), or the relay; the held recipient domains."""

import html
import re
import time

import pytest

from messaging.outbound import fleet_limits
from messaging.outbound.direct.destinations import DestinationGate
from messaging.outbound.envelope import Reply, SendResult

pytestmark = pytest.mark.django_db

PAGE = "/admin/domains/domain/destinations/"


@pytest.fixture(autouse=True)
def _fresh_local_state(monkeypatch):
    monkeypatch.setattr(fleet_limits, "_local", fleet_limits._LocalState())
    monkeypatch.setattr(fleet_limits, "_destinations", {})


def row(page: str, name: str) -> str:
    found = re.search(rf'<tr data-destination="{re.escape(name)}">(.*?)</tr>', page, re.S)
    assert found, page
    return html.unescape(re.sub(r"\s+", " ", found[1]))


def test_a_throttled_destination_shows_its_hosts_lowered_rate_and_last_error(operator, settings):
    settings.EMAIL_URL = "mx://"
    settings.MAILSERVICE_MX_CONNECTIONS = 3
    gate = DestinationGate()
    for _ in range(30):  # traffic before the slow-down, so that halving it shows
        fleet_limits.permit("google.com")
    time.sleep(0.3)
    gate.note("google.com", ["aspmx.l.google.com", "alt1.aspmx.l.google.com"])
    gate.note("calm.example", ["calm.example"])
    gate.observe("google.com", SendResult(final=Reply(421, "4.7.28 unusual rate of mail from your IP")))

    page = operator.get(PAGE).content.decode()

    google = row(page, "google.com")
    assert "aspmx.l.google.com, alt1.aspmx.l.google.com" in google
    assert "/ 3" in google and "lowered because google.com answered 421 4.7.28" in google
    assert "421 4.7.28 unusual rate of mail from your IP" in google
    assert "unlimited" in row(page, "calm.example")
    assert 'href="destinations/"' in operator.get("/admin/domains/domain/").content.decode()


def test_in_relay_mode_the_relay_is_the_one_destination(operator, settings):
    settings.EMAIL_URL = "smtp://relay.example:2525"

    page = operator.get(PAGE).content.decode()

    assert "through the relay relay.example:2525" in page
    assert "unlimited" in row(page, "the relay")


def test_with_the_file_outbox_there_is_no_destination_and_no_relay(operator, settings):
    settings.EMAIL_URL = None

    page = operator.get(PAGE).content.decode()

    assert "there is no destination" in page and "the relay" not in page


def test_a_staff_member_without_domain_access_is_refused(client, django_user_model):
    user = django_user_model.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(user)

    assert client.get(PAGE).status_code == 403


def test_direct_delivery_shows_each_destination_s_tls_policy_and_the_source_addresses(operator, settings):
    settings.EMAIL_URL = "mx://"
    settings.MAILSERVICE_SOURCE_ADDRESSES = {"192.0.2.25": "mta1.sender.test", "192.0.2.26": ""}
    settings.MAILSERVICE_HELO_NAME = "out.sender.test"
    settings.MAILSERVICE_WARMUP = 50
    DestinationGate().note("google.com", ["aspmx.l.google.com"], tls_policy="MTA-STS enforce (gmail.com)")

    page = operator.get(PAGE).content.decode()

    assert "MTA-STS enforce (gmail.com)" in row(page, "google.com")
    sources = {
        address: html.unescape(re.sub(r"\s+", " ", cells))
        for address, cells in re.findall(r'<tr data-address="([^"]+)">(.*?)</tr>', page, re.S)
    }
    assert set(sources) == {"192.0.2.25", "192.0.2.26"}
    assert "mta1.sender.test" in sources["192.0.2.25"] and "out.sender.test" in sources["192.0.2.26"]
    assert "starts at its first send (50 per destination on day 1)" in sources["192.0.2.25"]
    assert "all (no pool)" in sources["192.0.2.25"]

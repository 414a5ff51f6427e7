"""GET /metrics: private, Prometheus text, and one host's counts whichever process made them."""

import re
import uuid
from datetime import timedelta

import httpx
import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from apikeys.models import ApiKey
from domains.services import sending_pause
from messaging.models import DmarcRecord, DmarcReport, Message, ReportMail, Status, TlsReport
from tests.api.wire import bearer, inline_body
from tests.factories import ApiKeyFactory, DomainFactory, MessageFactory
from tests.harness import FAST_DISPATCH, celery_worker, smtp_sink, wait_until, web_server

TOKEN = "metrics-token-for-tests-0123456789"


def scrape(client, token: str = TOKEN) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    text = response.content.decode() if hasattr(response, "content") else response.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.fixture
def token(settings):
    settings.MAILSERVICE_METRICS_TOKEN = TOKEN


@pytest.mark.django_db
def test_metrics_do_not_exist_without_a_token(settings):
    settings.MAILSERVICE_METRICS_TOKEN = None

    response = Client().get("/metrics", headers={"Authorization": "Bearer anything"})

    assert response.status_code == 404 and response.json()["error"]["code"] == "NotFound"


@pytest.mark.django_db
@pytest.mark.parametrize("header", [None, "Bearer wrong", f"Basic {TOKEN}", f"Bearer {TOKEN}x"])
def test_metrics_need_the_token(token, header):
    response = Client().get("/metrics", headers={"Authorization": header} if header else {})

    assert response.status_code == 401 and response.json()["error"]["code"] == "Unauthorized"


@pytest.mark.django_db
@pytest.mark.parametrize("header", [TOKEN, f"bearer{TOKEN}", f" {TOKEN}", f"Token {TOKEN}"])
def test_the_token_without_the_bearer_scheme_is_refused(token, header):
    response = Client().get("/metrics", headers={"Authorization": header})

    assert response.status_code == 401 and response.json()["error"]["code"] == "Unauthorized"


@pytest.mark.django_db
def test_guessed_tokens_are_throttled_per_address_until_the_window_ends(token, settings):
    settings.MAILSERVICE_METRICS_FAILURE_RATE = "10/h"  # one window for the whole test
    guesser, other = Client(REMOTE_ADDR="192.0.2.7"), Client(REMOTE_ADDR="192.0.2.8")

    guesses = [guesser.get("/metrics", headers={"Authorization": f"Bearer guess-{n}"}) for n in range(12)]
    right_token = guesser.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})

    assert [response.status_code for response in guesses] == [401] * 10 + [429] * 2
    assert right_token.status_code == 429 and right_token.json()["error"]["code"] == "RateLimited"
    assert 0 < int(right_token["Retry-After"]) <= 3600
    assert other.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).status_code == 200


@pytest.mark.django_db
def test_an_accepted_send_is_counted_and_timed(token, full_key):
    before = scrape(Client())
    domain = full_key.domain.name

    response = Client().post("/v1/send", inline_body(), content_type="application/json", headers=bearer(full_key))
    assert response.status_code == 200

    after = scrape(Client())
    accepted = ("mailservice_messages_total", (("domain", domain), ("status", "accepted")))
    assert after[accepted] - before.get(accepted, 0) == 1
    count = ("mailservice_accept_seconds_count", ())
    assert after[count] - before.get(count, 0) == 1


@pytest.mark.django_db
def test_a_test_keys_send_and_its_simulated_bounce_are_not_counted_as_mail(
    token, domain, settings, tmp_path, django_capture_on_commit_callbacks
):
    settings.MAILSERVICE_OUTBOX_DIR = tmp_path
    test_key = ApiKeyFactory(domain=domain)
    ApiKey.objects.filter(pk=test_key.pk).update(is_test=True)
    before = scrape(Client())

    with django_capture_on_commit_callbacks(execute=True):
        response = Client().post(
            "/v1/send",
            inline_body(to="bounced@simulator.test"),
            content_type="application/json",
            headers=bearer(test_key),
        )
    assert response.status_code == 200
    assert Message.objects.get().status == Status.BOUNCED

    after = scrape(Client())
    counted = {
        name: after[name] - before.get(name, 0)
        for name in after
        if name[0] in ("mailservice_messages_total", "mailservice_bounces_total") and after[name] != before.get(name, 0)
    }
    assert counted == {}
    count = ("mailservice_accept_seconds_count", ())
    assert after[count] - before.get(count, 0) == 1  # timed: the server did the work


@pytest.mark.django_db
def test_queue_gauges_and_pause_state_are_read_at_scrape(token, domain):
    other = DomainFactory(name="other.example.com")
    for _ in range(3):
        MessageFactory(domain=domain, status=Status.ACCEPTED)
    MessageFactory(domain=domain, status=Status.DELIVERED)
    sending_pause(domain=other, actor="ops", reason="test")

    samples = scrape(Client())

    assert samples[("mailservice_queue_depth", ())] == 3
    assert samples[("mailservice_queue_oldest_due_age_seconds", ())] >= 0
    assert samples[("mailservice_sending_paused", (("auto", "false"), ("domain", "other.example.com")))] == 1
    assert samples[("mailservice_sending_paused", (("auto", "false"), ("domain", domain.name)))] == 0
    assert samples[("mailservice_sending_paused_all", ())] == 0


@pytest.mark.django_db
def test_the_last_days_dmarc_pass_rate_and_tls_failures_are_gauges_per_domain(token, domain):
    def mail() -> ReportMail:
        return ReportMail.objects.create(kind="dmarc", outcome="stored", raw=b"")

    now = timezone.now()
    for report_id, ended, counts, authenticated in [
        ("new", now - timedelta(hours=3), (30, 10), True),
        ("old", now - timedelta(days=2), (5,), True),
        ("forged", now - timedelta(hours=3), (0, 1000), False),  # not counted: its mail was not the reporter's
    ]:
        report = DmarcReport.objects.create(
            domain=domain,
            org_name="google.com",
            report_id=report_id,
            begin=ended - timedelta(days=1),
            end=ended,
            authenticated=authenticated,
            mail=mail(),
        )
        for index, count in enumerate(counts):  # the first source passes, the others fail
            DmarcRecord.objects.create(
                report=report, source_ip=f"192.0.2.{index}", count=count, dkim_aligned=index == 0, spf_aligned=False
            )
    TlsReport.objects.create(
        domain=domain,
        org_name="Google Inc.",
        report_id="t",
        begin=now - timedelta(days=1),
        end=now,
        successful_sessions=50,
        failed_sessions=4,
        authenticated=True,
        mail=mail(),
    )

    samples = scrape(Client())

    assert samples[("mailservice_dmarc_pass_rate", (("domain", domain.name),))] == 0.75
    assert samples[("mailservice_tls_report_failed_sessions", (("domain", domain.name),))] == 4


@pytest.mark.django_db
def test_the_scrape_gauges_cost_ten_queries(token, domain, django_assert_num_queries):
    """The queue (2), the domains' and the global switch (2), the webhook backlog and disabled endpoints (2),
    the days kept past retention (2: the message partitions, the longest retention), the last day's DMARC
    and TLS reports (2)."""
    MessageFactory.create_batch(5, domain=domain, status=Status.ACCEPTED)
    with django_assert_num_queries(10 if connection.vendor == "postgresql" else 8):
        scrape(Client())


@pytest.mark.live
@pytest.mark.django_db(transaction=True)
def test_a_delivery_counted_by_a_worker_shows_on_the_webs_metrics(tmp_path):
    """Two gunicorn workers and a Celery worker share PROMETHEUS_MULTIPROC_DIR, as on one host."""
    domain = DomainFactory(name="metrics.example.com")
    key = ApiKeyFactory(domain=domain)
    with smtp_sink() as sink:
        env = FAST_DISPATCH | {
            "EMAIL_URL": sink.url,
            "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}",
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path),
            "MAILSERVICE_METRICS_TOKEN": TOKEN,
        }
        with web_server(workers=2, **env) as base_url, celery_worker(**env):
            web = httpx.Client(base_url=base_url, timeout=30)
            body = inline_body(**{"from": f"shop@{domain.name}"})
            for _ in range(3):
                assert web.post("/v1/send", headers=bearer(key), json=body).status_code == 200
            delivered = ("mailservice_messages_total", (("domain", domain.name), ("status", "delivered")))
            wait_until(lambda: scrape(web).get(delivered) == 3, timeout=60, interval=0.5, message="3 deliveries")
            samples = scrape(web)

    assert samples[("mailservice_messages_total", (("domain", domain.name), ("status", "accepted")))] == 3
    assert samples[("mailservice_relay_replies_total", (("reply_class", "2xx"),))] == 3
    assert samples[("mailservice_delivery_seconds_count", ())] == 3
    assert samples[("mailservice_queue_depth", ())] == 0
    assert not any(re.search(r"@|msg_", str(labels)) for _, labels in samples)  # no recipients, no message ids

"""A test key over SMTP submission stays in the sandbox, as it does over HTTP: real processes
(run_submission_smtp, gunicorn, a Celery worker) and a relay sink that must receive nothing."""

import email.policy
import ssl
import uuid
from collections.abc import Iterator

import httpx
import pytest

from apikeys.models import ApiKey
from domains.models import DailyUsage, Domain
from domains.services import domain_set_allowance
from messaging.models import EventType, Message, Status
from messaging.outbound.sandbox import HARD_BOUNCE
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import (
    FAST_DISPATCH,
    celery_worker,
    self_signed_certificate,
    smtp_sink,
    submission_smtp_server,
    wait_until,
    web_server,
)
from tests.submission.test_submission_live import authenticated, message

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

DOMAIN = "app.example.com"
QUEUE = f"test-submission-sandbox-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    cert, key = self_signed_certificate(tmp_path_factory.mktemp("tls"))
    return str(cert), str(key)


@pytest.fixture(scope="module")
def env(tls_files: tuple[str, str]) -> dict[str, str]:
    return FAST_DISPATCH | {
        "MAILSERVICE_TLS_CERT_FILE": tls_files[0],
        "MAILSERVICE_TLS_KEY_FILE": tls_files[1],
        "CELERY_TASK_DEFAULT_QUEUE": QUEUE,
    }


@pytest.fixture(scope="module")
def port(django_db_setup, django_db_blocker, env: dict[str, str]) -> Iterator[int]:
    with django_db_blocker.unblock(), submission_smtp_server(**env) as port:
        yield port


@pytest.fixture(scope="module")
def client_tls(tls_files: tuple[str, str]) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=tls_files[0])


@pytest.fixture
def domain() -> Domain:
    return DomainFactory(name=DOMAIN)


@pytest.fixture
def test_key(domain: Domain) -> ApiKey:
    key = ApiKeyFactory(domain=domain)
    ApiKey.objects.filter(pk=key.pk).update(is_test=True)
    return key


def submit(port: int, client_tls: ssl.SSLContext, secret: str, recipient: str) -> None:
    with authenticated(port, client_tls, secret) as smtp:
        refused = smtp.sendmail(f"billing@{DOMAIN}", [recipient], message().as_bytes(policy=email.policy.SMTP))
    assert refused == {}


def test_a_test_key_over_smtp_never_reaches_the_relay_and_is_read_only_by_test_keys(
    port, client_tls, env, domain, test_key
):
    live_key = ApiKeyFactory(domain=domain)
    with (
        smtp_sink() as sink,
        web_server(workers=1, **env) as base_url,
        celery_worker(**env, EMAIL_URL=sink.url) as worker,
    ):
        submit(port, client_tls, test_key.secret, "bounced@simulator.test")
        stored = Message.objects.get()
        wait_until(
            lambda: Message.objects.get().status != Status.ACCEPTED,
            timeout=60,
            interval=0.2,
            message=f"the simulated outcome (worker log: {worker.log_path})",
        )
        assert sink.received == []

        def listed(secret: str) -> list[str]:
            response = httpx.get(f"{base_url}/v1/messages", headers={"Authorization": f"Bearer {secret}"})
            return [found["id"] for found in response.json()["data"]]

        assert listed(test_key.secret) == [stored.public_id]
        assert listed(live_key.secret) == []

    stored.refresh_from_db()
    assert stored.is_test and stored.status == Status.BOUNCED
    assert list(stored.events.values_list("type", "detail")) == [
        (EventType.ACCEPTED, ""),
        (EventType.BOUNCED, f"{HARD_BOUNCE} (reason: user_unknown)"),
    ]
    assert not DailyUsage.objects.filter(sent_count__gt=0).exists()


def test_a_test_key_over_smtp_is_not_held_to_the_daily_allowance(port, client_tls, domain, test_key):
    domain_set_allowance(domain=domain, allowance=0)
    submit(port, client_tls, test_key.secret, "delivered@simulator.test")
    assert Message.objects.get().is_test

"""LOG_FORMAT=json, and no secret in any log line of a full run (web and worker, at DEBUG)."""

import json
import os
import uuid

import httpx
import pytest
from django.conf import settings

from mailservice.encryption import decrypt_secret
from messaging.models import Message, Status
from tests.api.wire import bearer, inline_body
from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import FAST_DISPATCH, ROOT, celery_worker, smtp_sink, wait_until, web_server

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

METRICS_TOKEN = "metrics-token-for-the-log-test-0123456789"


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_a_full_run_logs_json_with_context_and_never_a_secret():
    domain = DomainFactory(name="logs.example.com")
    key = ApiKeyFactory(domain=domain)
    with smtp_sink() as sink:
        env = FAST_DISPATCH | {
            "EMAIL_URL": sink.url,
            "CELERY_TASK_DEFAULT_QUEUE": f"test-{uuid.uuid4().hex}",
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "DEBUG",
            "MAILSERVICE_METRICS_TOKEN": METRICS_TOKEN,
        }
        with web_server(workers=1, **env) as base_url, celery_worker(**env) as worker:
            web = httpx.Client(base_url=base_url, timeout=30)
            sent = [web.post("/v1/send", headers=bearer(key), json=inline_body(**{"from": f"a@{domain.name}"}))]
            sent.append(web.post("/v1/send", headers=bearer(key), json=inline_body(**{"from": "a@elsewhere.org"})))
            web.get("/v1/messages", headers={"Authorization": f"Bearer {key.secret[:-1]}x"})  # a wrong key: 401
            web.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
            message_id = sent[0].json()["id"]
            wait_until(
                lambda: Message.objects.filter(public_id=message_id, status=Status.DELIVERED).exists(),
                timeout=60,
                interval=0.3,
                message="the delivery",
            )
            web_log = (ROOT / "var" / f"web-{base_url.rsplit(':', 1)[1]}.log").read_text()
            worker_log = worker.log_path.read_text()

    web_lines, worker_lines = _json_lines(web_log), _json_lines(worker_log)
    accepted = [line for line in web_lines if line["message"] == "accepted"]
    assert accepted and accepted[0]["message_id"] == message_id and accepted[0]["domain"] == domain.name
    assert accepted[0]["request_id"] == sent[0].headers["x-request-id"]
    assert all(
        {"time", "level", "logger", "message", "request_id", "message_id", "domain"} <= set(line) for line in web_lines
    )
    delivered = [line for line in worker_lines if line["message"] == "dispatch: delivered"]
    assert delivered and delivered[0]["message_id"] == message_id and delivered[0]["domain"] == domain.name

    pem = decrypt_secret(domain.dkim_keys.get().private_key)
    pem_lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    secrets = {
        "the API key": key.secret,
        "the API key's random part": key.secret.rsplit("_", 1)[1],
        "the API key's digest": key.secret_hash,
        "SECRET_KEY": os.environ["SECRET_KEY"],
        "the metrics token": METRICS_TOKEN,
        "the encrypted DKIM key": domain.dkim_keys.get().private_key,
        "MAILSERVICE_ENCRYPTION_KEYS": settings.MAILSERVICE_ENCRYPTION_KEYS[0],
    } | {f"DKIM private key line {n}": line for n, line in enumerate(pem_lines)}
    for where, log in (("web", web_log), ("worker", worker_log)):
        leaked = [name for name, secret in secrets.items() if secret in log]
        assert not leaked, f"{where} log contains {leaked}"

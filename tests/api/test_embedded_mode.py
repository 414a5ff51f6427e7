"""The README's first run: DEBUG on, nothing configured, SQLite under var/, no Redis, no broker."""

import subprocess
import sys
import time

import httpx
import pytest

from tests.harness import ROOT, answers_http, child_env, child_server, wait_until, web_server
from tests.webhooks.receiver import webhook_receiver

pytestmark = [pytest.mark.live, pytest.mark.slow]


def _embedded(var_dir) -> dict[str, str]:
    # Empty values count as unset (config/env.py), so every setting falls back to its embedded default.
    unset = dict.fromkeys(("DATABASE_URL", "REDIS_URL", "CELERY_BROKER_URL", "SECRET_KEY", "EMAIL_URL"), "")
    return {**unset, "DEBUG": "true", "MAILSERVICE_VAR_DIR": str(var_dir)}


def _manage(*args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def test_a_send_and_a_list_work_on_the_embedded_defaults(tmp_path):
    env = _embedded(tmp_path)
    _manage("migrate", "--verbosity", "0", env=child_env(**env))
    printed = _manage("bootstrap_demo", env=child_env(**env)).strip().splitlines()[-1]
    assert printed.startswith("KEY=")
    secret = printed.removeprefix("KEY=")

    with web_server(workers=1, **env) as base_url:
        headers = {"Authorization": f"Bearer {secret}"}
        sent = httpx.post(
            f"{base_url}/v1/send",
            headers=headers,
            json={"from": "me@demo.example", "to": "you@example.org", "subject": "Hi", "text": "Hello"},
            timeout=30,
        )
        listed = httpx.get(f"{base_url}/v1/messages", headers=headers, timeout=30)

    assert sent.status_code == 200, sent.text
    assert [item["id"] for item in listed.json()["data"]] == [sent.json()["id"]]
    assert (tmp_path / "mailservice.sqlite3").exists()  # the embedded SQLite database, not the test one


def test_the_demo_key_survives_another_run_and_only_its_hash_is_stored(tmp_path):
    env = child_env(**_embedded(tmp_path))
    _manage("migrate", "--verbosity", "0", env=env)

    first = _manage("bootstrap_demo", env=env).strip().splitlines()[-1]
    second = _manage("bootstrap_demo", env=env).strip().splitlines()[-1]

    assert first == second and first == "KEY=" + (tmp_path / "demo_key").read_text().strip()
    assert oct((tmp_path / "demo_key").stat().st_mode & 0o777) == "0o600"
    assert first.removeprefix("KEY=").encode() not in (tmp_path / "mailservice.sqlite3").read_bytes()


def test_manage_py_reads_the_development_settings_from_the_env_file(tmp_path):
    """After `make run`, `.venv/bin/python manage.py …` needs no DEBUG=true in front (stumble 1)."""
    env_file = tmp_path / ".env"
    env_file.write_text(f"DEBUG=true\nMAILSERVICE_VAR_DIR={tmp_path}\n")
    env = child_env(**_embedded(tmp_path))
    for name in ("DEBUG", "MAILSERVICE_VAR_DIR"):
        del env[name]
    env["MAILSERVICE_ENV_FILE"] = str(env_file)

    _manage("migrate", "--verbosity", "0", env=env)

    assert (tmp_path / "mailservice.sqlite3").exists()


def test_webhooks_are_sent_by_the_web_process_as_under_make_run(tmp_path):
    """No beat and no webhooks worker: the web process fans events out and sends them from a thread
    of its own, retries on its periodic tick, and never makes the API wait for a slow receiver."""
    env = {**_embedded(tmp_path), "MAILSERVICE_WEBHOOK_ALLOW_PRIVATE": "true"}
    _manage("migrate", "--verbosity", "0", env=child_env(**env))
    key = _manage("bootstrap_demo", env=child_env(**env)).strip().splitlines()[-1].removeprefix("KEY=")
    runserver = [sys.executable, "manage.py", "runserver", "--noreload", "127.0.0.1:{port}"]

    with (
        webhook_receiver() as receiver,
        child_server(
            runserver,
            name="runserver",
            ready=lambda port: answers_http(f"http://127.0.0.1:{port}/v1/openapi.json"),
            env=env,
        ) as server,
    ):
        secret = _manage("create_webhook", "demo.example", receiver.url, env=child_env(**env)).strip().splitlines()[-1]
        receiver.behaviour.statuses = [
            500
        ]  # the first request fails: retried about 5 s later, with no request to wake it

        def send() -> str:
            body = {"from": "me@demo.example", "to": "you@example.org", "subject": "Hi", "text": "Hello"}
            url, headers = f"http://127.0.0.1:{server.port}/v1/send", {"Authorization": f"Bearer {key}"}
            response = httpx.post(url, headers=headers, json=body, timeout=30)
            assert response.status_code == 200, response.text
            return response.json()["id"]

        def received(type_: str, message_id: str) -> int:
            return sum(event["data"]["id"] == message_id for event in receiver.events(type_))

        first = send()
        wait_until(
            lambda: received("email.accepted", first) == 2 and received("email.delivered", first) == 1,
            timeout=30,
            message="email.accepted (once failed, then retried) and email.delivered",
        )

        receiver.behaviour.delay = 1.5
        second = send()
        wait_until(lambda: received("email.accepted", second), timeout=30, message="the second send's first event")
        started = time.monotonic()
        third = send()  # while the receiver still holds the request for the second send
        answered_in = time.monotonic() - started
        wait_until(lambda: received("email.delivered", third), timeout=30, message="the third send's last event")

    assert answered_in < 1.5
    assert [event["type"] for event in receiver.verified(secret)] == [
        "email.accepted",
        "email.delivered",
        "email.accepted",
        "email.accepted",
        "email.delivered",
        "email.accepted",
        "email.delivered",
    ]

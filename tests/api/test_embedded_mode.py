"""The README's first run: DEBUG on, nothing configured, SQLite under var/, no Redis, no broker."""

import subprocess
import sys

import httpx
import pytest

from tests.harness import ROOT, child_env, web_server

pytestmark = pytest.mark.live


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

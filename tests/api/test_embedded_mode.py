"""The README's first run: `DEBUG=true manage.py runserver` on SQLite, nothing else configured."""

import httpx
import pytest

from tests.live import embedded_env, embedded_server, manage

pytestmark = pytest.mark.live


def test_a_send_and_a_list_work_on_the_embedded_defaults(tmp_path):
    env = embedded_env(tmp_path)
    manage("migrate", "--verbosity", "0", env=env)
    secret = manage("bootstrap_demo", env=env).strip().splitlines()[-1]

    with embedded_server(tmp_path) as base_url:
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
    assert (tmp_path / "mailservice.sqlite3").exists()

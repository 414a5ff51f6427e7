"""deploy/nginx/mailservice.conf in front of the Procfile's web command: TLS, forwarding headers, limits.

Debian's nginx (`apt-get install nginx-light`; .ci/run installs it) runs the shipped site file with
only its ports, certificate paths and upstream port changed, on loopback.
"""

import os
import random
import ssl
from pathlib import Path

import httpx
import pytest

from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import procfile_web
from tests.harness.nginx import NGINX, nginx_site

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]


def _client(base_url: str, cert: Path, source: str) -> httpx.Client:
    """A client whose connections come from `source`, one of the many addresses of loopback."""
    transport = httpx.HTTPTransport(local_address=source, verify=ssl.create_default_context(cafile=str(cert)))
    return httpx.Client(base_url=base_url, transport=transport, timeout=30)


@pytest.fixture
def nginx_available() -> None:
    if not NGINX.exists():
        message = f"nginx not found at {NGINX} (apt-get install nginx-light)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


def test_the_api_works_through_nginx_and_the_rate_limit_sees_the_real_client(tmp_path, nginx_available):
    key = ApiKeyFactory(domain=DomainFactory(name="proxied.example.com"))
    headers = {"Authorization": f"Bearer {key.secret}"}
    # Client addresses of this run only, so no other test's counters are in the way.
    subnet = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}"
    smoke, busy, quiet = f"{subnet}.1", f"{subnet}.2", f"{subnet}.3"
    env = {"MAILSERVICE_TRUSTED_PROXIES": "127.0.0.1", "MAILSERVICE_RATE_LIMIT": "5/m", "SECURE_SSL_REDIRECT": "true"}
    with (
        procfile_web(**env) as web_port,
        nginx_site(tmp_path, upstreams=[f"127.0.0.1:{web_port}"]) as (http_port, https_port, cert),
    ):
        base = f"https://127.0.0.1:{https_port}"
        with _client(base, cert, smoke) as client:
            sent = client.post(
                "/v1/send",
                headers=headers,
                json={"from": "a@proxied.example.com", "to": "b@example.org", "subject": "Hi", "text": "Hello"},
            )
            listed = client.get("/v1/messages", headers=headers)
            too_large = client.post(
                "/v1/send",
                headers={**headers, "Content-Type": "application/json"},
                content=b" " * (4 * 1024 * 1024 + 10),
            )
            # Past one send's limit, within a batch's: nginx hands it on, and the app reads it (blank: not JSON).
            batch = client.post(
                "/v1/send/batch",
                headers={**headers, "Content-Type": "application/json"},
                content=b" " * (6 * 1024 * 1024),
            )
        plain = httpx.get(f"http://127.0.0.1:{http_port}/v1/messages", timeout=10)
        direct = httpx.get(f"http://127.0.0.1:{web_port}/healthz", timeout=10)

        with _client(base, cert, busy) as client:
            # 12 requests at 5/m: even split by a window's end, one window sees its sixth.
            answers = [client.get("/v1/messages", headers=headers).status_code for _ in range(12)]
        with _client(base, cert, quiet) as client:
            # A forged X-Forwarded-For naming the busy client does not make this one count as it.
            forged = client.get("/v1/messages", headers={**headers, "X-Forwarded-For": busy})

    assert sent.status_code == 200, sent.text
    assert [item["id"] for item in listed.json()["data"]] == [sent.json()["id"]]
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == "RequestTooLarge"
    assert batch.status_code == 400 and batch.json()["error"]["code"] == "InvalidJson"
    assert plain.status_code == 308 and plain.headers["location"].startswith("https://")
    # Without the proxy's X-Forwarded-Proto the request is plain HTTP: SECURE_SSL_REDIRECT sends it away.
    assert direct.status_code == 301
    assert 429 in answers and answers.count(200) <= 10 and set(answers) == {200, 429}
    assert forged.status_code == 200

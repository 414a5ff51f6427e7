"""deploy/nginx/mailservice.conf in front of the Procfile's web command: TLS, forwarding headers, limits.

Debian's nginx (`apt-get install nginx-light`; .ci/run installs it) runs the shipped site file with
only its ports, certificate paths and upstream port changed, on loopback.
"""

import os
import random
import re
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.factories import ApiKeyFactory, DomainFactory
from tests.harness import ROOT, answers_http, free_port, procfile_web, self_signed_certificate, wait_until

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

NGINX = Path(os.environ.get("NGINX", "/usr/sbin/nginx"))
SITE = ROOT / "deploy" / "nginx" / "mailservice.conf"


@contextmanager
def nginx_site(tmp_path: Path, *, upstream_port: int) -> Iterator[tuple[int, int, Path]]:
    """The shipped site, ports and certificate paths substituted; yields (http port, https port, cert)."""
    cert, key = self_signed_certificate(tmp_path)
    http_port, https_port = free_port(), free_port()
    site = SITE.read_text()
    site = re.sub(r"^\s*listen \[::\].*\n", "", site, flags=re.MULTILINE)
    site = site.replace("listen 80;", f"listen 127.0.0.1:{http_port};")
    site = site.replace("listen 443 ssl http2;", f"listen 127.0.0.1:{https_port} ssl http2;")
    site = re.sub(r"ssl_certificate .*;", f"ssl_certificate {cert};", site)
    site = re.sub(r"ssl_certificate_key .*;", f"ssl_certificate_key {key};", site)
    site = site.replace("server 127.0.0.1:8000;", f"server 127.0.0.1:{upstream_port};")
    temp = "".join(
        f"{kind}_temp_path {tmp_path}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (tmp_path / "site.conf").write_text(site)
    (tmp_path / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"worker_processes 1;\npid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\nevents {{}}\n"
        + f"http {{\naccess_log {tmp_path}/access.log;\n{temp}include {tmp_path}/site.conf;\n}}\n"
    )
    command = [str(NGINX), "-p", str(tmp_path), "-c", str(tmp_path / "nginx.conf"), "-g", "daemon off;"]
    check = subprocess.run([*command[:-2], "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: answers_http(f"http://127.0.0.1:{http_port}/"), timeout=15, message="nginx")
        yield http_port, https_port, cert
    finally:
        process.terminate()
        process.wait(timeout=15)


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
    with procfile_web(**env) as web_port, nginx_site(tmp_path, upstream_port=web_port) as (http_port, https_port, cert):
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

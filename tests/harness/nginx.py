"""deploy/nginx/mailservice.conf run by Debian's nginx (`apt-get install nginx-light`) on loopback: the
shipped site file with only its ports, certificate paths and upstream servers changed."""

import os
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.harness.process import ROOT, ChildProcess, free_port
from tests.harness.servers import answers_http, running, self_signed_certificate

NGINX = Path(os.environ.get("NGINX", "/usr/sbin/nginx"))
SITE = ROOT / "deploy" / "nginx" / "mailservice.conf"


@contextmanager
def nginx_site(
    directory: Path, *, upstreams: list[str], host: str = "127.0.0.1", netns: str | None = None
) -> Iterator[tuple[int, int, Path]]:
    """The shipped site on `host` (in the network namespace `netns`) in front of `upstreams` ("address:port"
    each), its files in `directory`; yields (http port, https port, certificate)."""
    cert, key = self_signed_certificate(directory)
    http_port, https_port = free_port(), free_port()
    site = SITE.read_text()
    site = re.sub(r"^\s*listen \[::\].*\n", "", site, flags=re.MULTILINE)
    site = site.replace("listen 80;", f"listen {host}:{http_port};")
    site = site.replace("listen 443 ssl http2;", f"listen {host}:{https_port} ssl http2;")
    site = re.sub(r"ssl_certificate .*;", f"ssl_certificate {cert};", site)
    site = re.sub(r"ssl_certificate_key .*;", f"ssl_certificate_key {key};", site)
    site = site.replace("server 127.0.0.1:8000;", " ".join(f"server {upstream};" for upstream in upstreams))
    temp = "".join(
        f"{kind}_temp_path {directory}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    (directory / "site.conf").write_text(site)
    (directory / "nginx.conf").write_text(
        ("user root;\n" if os.geteuid() == 0 else "")
        + f"worker_processes 1;\npid {directory}/nginx.pid;\nerror_log {directory}/error.log;\nevents {{}}\n"
        + f"http {{\naccess_log {directory}/access.log;\n{temp}include {directory}/site.conf;\n}}\n"
    )
    command = [str(NGINX), "-p", str(directory), "-c", str(directory / "nginx.conf")]
    in_netns = ["ip", "netns", "exec", netns] if netns else []  # `-t` binds the addresses too
    check = subprocess.run([*in_netns, *command, "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    nginx = ChildProcess(
        [*command, "-g", "daemon off;"],
        name="nginx",
        env=dict(os.environ),
        ready=lambda: answers_http(f"http://{host}:{http_port}/"),
        ready_timeout=15,
        netns=netns,
    )
    with running(nginx):
        yield http_port, https_port, cert

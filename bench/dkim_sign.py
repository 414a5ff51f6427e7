"""DKIM signing rate per core: messaging.outbound.dkim (RSA through OpenSSL) against dkimpy's own signer.

    DJANGO_SETTINGS_MODULE=config.settings SECRET_KEY=x python bench/dkim_sign.py [--seconds 3]

Signs a typical rendered message (multipart/alternative, a few KB) in one process for a fixed
CPU time and prints messages per CPU-second (per core; on a shared machine wall-clock rates
would measure the neighbours too); the issue's target for our signer is 2000/s per core.
A bare OpenSSL RSA-2048 signature is measured too: it is the ceiling for any RSA-2048 signer.
"""

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only")

import django  # noqa: E402

django.setup()

import dkim  # noqa: E402
from cryptography.hazmat.primitives import hashes  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import padding  # noqa: E402
from django.utils import timezone  # noqa: E402

from domains.services import dkim_key_pair  # noqa: E402
from messaging.models import Message  # noqa: E402
from messaging.outbound.dkim import SIGNED_HEADERS, dkim_sign, load_private_key  # noqa: E402
from messaging.rfc5322.rendering import render_message  # noqa: E402

TARGET = 2000


def rate(sign: Callable[[], bytes], seconds: float) -> float:
    """Signatures per second of CPU time this process got (the machine may be shared, like `openssl speed`)."""
    count, started = 0, time.process_time()
    while (elapsed := time.process_time() - started) < seconds:
        sign()
        count += 1
    return count / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="time spent on each signer")
    seconds = parser.parse_args().seconds

    private_pem, public_key = dkim_key_pair()
    key = load_private_key(private_pem)  # parsed once, as the worker's per-process cache does
    message = Message(
        public_id="msg_bench",
        from_address="Acme Shop <shop@acme.example.com>",
        to=["Bob Example <bob@example.org>"],
        cc=["carol@example.org"],
        bcc=[],
        reply_to=["help@acme.example.com"],
        subject="Your order #12345 has shipped",
        text="Hello Bob,\n\nyour order is on its way.\n" * 40,
        html="<p>Hello Bob,</p><p>your order is <b>on its way</b>.</p>\n" * 40,
        created_at=timezone.now(),
    )
    data = render_message(message).data

    def ours() -> bytes:
        return dkim_sign(data=data, domain="acme.example.com", selector="mail", private_key=key)

    headers = [name.encode() for name in SIGNED_HEADERS if name.encode() in data.lower()]

    def theirs() -> bytes:
        signature = dkim.sign(
            data,
            b"mail",
            b"acme.example.com",
            private_pem.encode(),
            canonicalize=(b"relaxed", b"relaxed"),
            include_headers=headers,
        )
        return signature + data

    def dns(name: bytes, timeout: int = 5) -> bytes:
        return f"v=DKIM1; k=rsa; p={public_key}".encode()

    assert dkim.verify(ours(), dnsfunc=dns) and dkim.verify(theirs(), dnsfunc=dns)

    def bare_rsa() -> bytes:
        return key.sign(data[:300], padding.PKCS1v15(), hashes.SHA256())

    print(f"message size: {len(data)} bytes, RSA-2048, relaxed/relaxed, one core")
    ceiling, ours_rate = rate(bare_rsa, seconds), rate(ours, seconds)
    print(f"bare OpenSSL RSA signature (ceiling):  {ceiling:8.0f} signatures/s")
    print(f"messaging.outbound.dkim (cryptography/OpenSSL): {ours_rate:8.0f} messages/s per core (target {TARGET})")
    print(f"dkimpy dkim.sign (pure-Python RSA):    {rate(theirs, seconds):8.0f} messages/s per core")
    print(f"messaging.outbound.dkim runs at {ours_rate / ceiling:.0%} of the bare RSA rate")


if __name__ == "__main__":
    main()

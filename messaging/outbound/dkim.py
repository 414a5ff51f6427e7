"""DKIM signing (RFC 6376), relaxed/relaxed, rsa-sha256, with the RSA step in OpenSSL.

dkimpy's pure-Python RSA costs about 6 ms per signature; OpenSSL through `cryptography` about
0.25 ms, so only canonicalization and hashing happen here in Python.

Private keys are stored encrypted (mailservice/encryption.py) and decrypted here only, once per
worker process and key: the cache is keyed by the DkimKey's id, so when a rotation makes another
key the domain's active one, the next batch signs with it.
"""

import base64
import hashlib
import re
import time
from functools import lru_cache

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa

from domains.selectors import SigningKey
from mailservice.encryption import UndecryptableSecret, decrypt_secret

# The usual header set (RFC 6376 section 5.4.1), signed when present, and the Feedback-ID Gmail's feedback
# loop trusts only when signed (messaging/feedback_id.py). From is signed one extra time ("oversigned") so
# that a second From added in transit breaks the signature.
SIGNED_HEADERS = (
    "from",
    "to",
    "cc",
    "reply-to",
    "subject",
    "date",
    "message-id",
    "mime-version",
    "content-type",
    "content-transfer-encoding",
    "feedback-id",
)
_WSP_RUN = re.compile(rb"[ \t]+")
# Only the runs canonicalization changes (a tab, or two or more blanks), and only when there are
# any: most bodies have none, which keeps a few-KB message cheap next to the RSA step.
_WSP_TO_COLLAPSE = re.compile(rb"\t[ \t]*| [ \t]+")
_TRAILING_WSP = re.compile(rb"[ \t]+\r\n")


class SigningKeyUnavailable(Exception):
    """The domain has no active key, or its key cannot be decrypted with the configured keys."""


def load_private_key(pem: str) -> rsa.RSAPrivateKey:
    key = serialization.load_pem_private_key(pem.encode(), password=None)
    if not isinstance(key, rsa.RSAPrivateKey):
        raise ValueError("the DKIM key is not an RSA key")
    return key


@lru_cache(maxsize=256)
def _stored_private_key(key_id: int, encrypted: str) -> rsa.RSAPrivateKey:
    try:
        return load_private_key(decrypt_secret(encrypted))
    except UndecryptableSecret as exc:
        raise SigningKeyUnavailable(f"the domain's DKIM key cannot be decrypted: {exc}") from None


def stored_private_key(key: SigningKey) -> rsa.RSAPrivateKey:
    """The key's private key, decrypted and parsed once per process and key (failures are not cached)."""
    return _stored_private_key(key.id, key.encrypted_private_key)


def _split_headers(data: bytes) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """[(name, raw field including name and CRLFs)], body; the message uses CRLF line endings."""
    head, _, body = data.partition(b"\r\n\r\n")
    fields: list[tuple[bytes, bytes]] = []
    for line in (head + b"\r\n").split(b"\r\n")[:-1]:
        if line[:1] in (b" ", b"\t") and fields:
            name, raw = fields[-1]
            fields[-1] = (name, raw + line + b"\r\n")
        else:
            fields.append((line.split(b":", 1)[0].strip().lower(), line + b"\r\n"))
    return fields, body


def relaxed_header(raw: bytes) -> bytes:
    """RFC 6376 3.4.2: lower-case name, unfold, one space for each whitespace run, trimmed."""
    name, _, value = raw.partition(b":")
    value = _WSP_RUN.sub(b" ", value.replace(b"\r\n", b"")).strip(b" ")
    return name.strip(b" \t").lower() + b":" + value + b"\r\n"


def relaxed_body(body: bytes) -> bytes:
    """RFC 6376 3.4.4: one space for each whitespace run, no trailing whitespace, no trailing empty lines."""
    if b"\t" in body or b"  " in body:
        body = _WSP_TO_COLLAPSE.sub(b" ", body)
    if b" \r\n" in body:
        body = _TRAILING_WSP.sub(b"\r\n", body)
    body = body.rstrip(b"\r\n")
    return body + b"\r\n" if body else b""


def dkim_sign(*, data: bytes, domain: str, selector: str, private_key: rsa.RSAPrivateKey) -> bytes:
    """`data` with a DKIM-Signature header prepended."""
    fields, body = _split_headers(data)
    body_hash = base64.b64encode(hashlib.sha256(relaxed_body(body)).digest()).decode()

    present = {name.decode() for name, _ in fields}
    signed = [name for name in SIGNED_HEADERS if name in present] + ["from"]
    tags = (
        f"v=1; a=rsa-sha256; c=relaxed/relaxed; d={domain}; s={selector};\r\n"
        f"\tt={int(time.time())}; h={':'.join(signed)};\r\n"
        f"\tbh={body_hash};\r\n"
        "\tb="
    )
    unsigned = f"DKIM-Signature: {tags}".encode()

    # Each listed name takes the next instance from the bottom; an exhausted name signs as empty.
    remaining: dict[bytes, list[bytes]] = {}
    for field_name, raw in fields:
        remaining.setdefault(field_name, []).append(raw)
    signing_input = b""
    for name in signed:
        instances = remaining.get(name.encode())
        if instances:
            signing_input += relaxed_header(instances.pop())
    signing_input += relaxed_header(unsigned)[:-2]

    signature = base64.b64encode(private_key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())).decode()
    folded = "\r\n\t".join(signature[i : i + 72] for i in range(0, len(signature), 72))
    return unsigned + folded.encode() + b"\r\n" + data

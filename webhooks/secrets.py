"""Webhook signing secrets: made, shown once as `whsec_<base64>`, stored encrypted.

The secret must be readable again to sign each request, so it is encrypted rather than hashed,
with a Fernet key derived from SECRET_KEY. `secret_seal` and `secret_open` are the only two
functions that know how; a dedicated key setting can replace the derivation there alone.
"""

import base64
import hashlib
import secrets

from cryptography.fernet import Fernet
from django.conf import settings

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
_KEY_CONTEXT = b"mailservice.webhooks.secret"


def _fernet() -> Fernet:
    key = hashlib.sha256(_KEY_CONTEXT + settings.SECRET_KEY.encode()).digest()
    return Fernet(base64.urlsafe_b64encode(key))


def secret_generate() -> str:
    """A new signing secret in the Standard Webhooks form: 24 random bytes (192 bits), base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")


def secret_seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode("ascii")


def secret_open(sealed: str) -> str:
    return _fernet().decrypt(sealed.encode("ascii")).decode()

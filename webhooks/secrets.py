"""Webhook signing secrets: made, shown once as `whsec_<base64>`, stored encrypted.

The secret must be readable again to sign each request, so it is encrypted (like DKIM keys, under
MAILSERVICE_ENCRYPTION_KEYS: mailservice/encryption.py) rather than hashed.
"""

import base64
import secrets

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret


def secret_generate() -> str:
    """A new signing secret in the Standard Webhooks form: 24 random bytes (192 bits), base64."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(24)).decode("ascii")

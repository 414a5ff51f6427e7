import secrets
import string

_ALPHABET = string.ascii_lowercase + string.digits


def random_token(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def public_id(prefix: str) -> str:
    """An opaque, unguessable public id such as `msg_3k9x…` (24 chars after the prefix, ~124 bits)."""
    return f"{prefix}_{random_token(24)}"

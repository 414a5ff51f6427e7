import hashlib
import hmac
import secrets
import string
from dataclasses import dataclass
from datetime import timedelta

from django.utils import timezone

from apikeys.cache import key_cached, key_remember, version_start
from apikeys.models import KEY_PREFIX_LENGTH, ApiKey, Permission
from domains.models import Domain
from mailservice.errors import ValidationFailed

KEY_SECRET_LENGTH = 40
_ALPHABET = string.ascii_letters + string.digits


def _random(length: int) -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(length))


def key_digest(raw_key: str) -> str:
    return hashlib.sha256(raw_key.encode()).hexdigest()


@dataclass(frozen=True)
class CreatedKey:
    api_key: ApiKey
    secret: str  # the full bearer key; shown once, never stored


def apikey_create(*, domain: Domain, permissions: list[str], name: str = "", is_test: bool = False) -> CreatedKey:
    unknown = sorted(set(permissions) - set(Permission.values))
    if unknown:
        raise ValidationFailed(f"Unknown permission {unknown[0]!r}; use {', '.join(Permission.values)}")
    if not permissions:
        raise ValidationFailed(f"A key needs at least one permission: {', '.join(Permission.values)}")
    prefix = _random(KEY_PREFIX_LENGTH)
    raw_key = f"ms_{prefix}_{_random(KEY_SECRET_LENGTH)}"
    api_key = ApiKey.objects.create(
        domain=domain,
        name=name,
        prefix=prefix,
        secret_hash=key_digest(raw_key),
        can_send=Permission.SEND in permissions,
        can_read=Permission.READ in permissions,
        can_write_suppressions=Permission.SUPPRESSIONS_WRITE in permissions,
        is_test=is_test,
    )
    return CreatedKey(api_key=api_key, secret=raw_key)


def apikey_revoke(*, api_key: ApiKey) -> ApiKey:
    if api_key.revoked_at is None:
        api_key.revoked_at = timezone.now()
        api_key.save(update_fields=["revoked_at", "updated_at"])
    return api_key


# Compared against when no key has the presented prefix, so an unknown key costs the same
# digest-and-compare as a wrong secret and timing does not tell prefixes apart.
_NO_SUCH_KEY_DIGEST = key_digest("ms_no-such-key")
_LAST_USED_RESOLUTION = timedelta(minutes=1)


def _is_key_text(text: str) -> bool:
    return text.isascii() and text.isalnum()


def key_prefix_of(raw_key: str) -> str | None:
    """The prefix a presented key claims (it finds the row; not secret), None when it cannot be one."""
    prefix = raw_key[3 : 3 + KEY_PREFIX_LENGTH]
    # Only a prefix of the key alphabet is looked up: anything else (NUL included) cannot exist.
    if not raw_key.startswith("ms_") or len(raw_key) < 3 + KEY_PREFIX_LENGTH + 1 or not _is_key_text(prefix):
        return None
    return prefix


def apikey_authenticate(*, raw_key: str, keys_version: bytes | None = None) -> ApiKey | None:
    """The active key matching raw_key, or None. Its domain comes along (one query, none when the
    key was read at `keys_version`, the current version of the keys: apikeys/cache.py)."""
    prefix = key_prefix_of(raw_key)
    api_key = _key_with_domain(prefix, keys_version) if prefix else None
    expected = api_key.secret_hash if api_key else _NO_SUCH_KEY_DIGEST
    matches = hmac.compare_digest(expected, key_digest(raw_key))
    if api_key is None or not matches or api_key.revoked_at is not None:
        return None
    _touch_last_used(api_key)
    return api_key


def _key_with_domain(prefix: str, keys_version: bytes | None) -> ApiKey | None:
    api_key = key_cached(prefix=prefix, version=keys_version)
    if api_key is not None:
        return api_key
    api_key = ApiKey.objects.select_related("domain").filter(prefix=prefix).first()
    if keys_version == b"":
        version_start()
    elif api_key is not None:
        key_remember(prefix=prefix, version=keys_version, api_key=api_key)
    return api_key


def _touch_last_used(api_key: ApiKey) -> None:
    """Record use at minute resolution, so the hot path does not write on every request."""
    now = timezone.now()
    if api_key.last_used_at is None or now - api_key.last_used_at > _LAST_USED_RESOLUTION:
        ApiKey.objects.filter(pk=api_key.pk).update(last_used_at=now)
        api_key.last_used_at = now

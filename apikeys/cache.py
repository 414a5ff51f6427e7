"""A web process's cache of API keys (with their domain), valid only at one version of the keys.

The key lookup was the accept path's costliest step (a query on every request, more than the
whole framework: bench/results/before-after-accept-round-three.md). A cached key is used only
while the keys' version in Redis is the one it was read at, and the API reads that version in the
round trip that counts the request (mailservice/ratelimit.py), so it costs nothing more. Any
change to a key or a domain (a revocation, a verification, a pause, an allowance) sets a new
version once committed: every process's next request reads it and looks the key up again, so the
change takes effect at once everywhere. Entries also expire after
MAILSERVICE_API_KEY_CACHE_SECONDS, which bounds the staleness should a new version fail to be set.
Without Redis (the embedded mode) nothing is cached.
"""

import logging
import secrets
import time
from typing import Any

import redis
from django.conf import settings
from django.db import transaction

from apikeys.models import ApiKey
from mailservice.ratelimit import shared_redis

logger = logging.getLogger(__name__)

VERSION_KEY = "apikeys:version"
_MAX_ENTRIES = 1024  # keys in use by one deployment; past it the cache starts over

_entries: dict[str, tuple[bytes, float, ApiKey]] = {}  # prefix: (version, expiry on the monotonic clock, key)


def key_cached(*, prefix: str, version: bytes | None) -> ApiKey | None:
    """The key of `prefix` as read at `version`, if it is still fresh. `version` is the one read from
    Redis with this request: b"" when Redis has none yet, None when it was not read."""
    entry = _entries.get(prefix)
    if not version or entry is None or entry[0] != version or entry[1] < time.monotonic():
        return None
    return entry[2]


def key_remember(*, prefix: str, version: bytes | None, api_key: ApiKey) -> None:
    """Keep a key read after `version` was (the version first, so a change committed in between
    leaves a newer version and the entry is never used)."""
    seconds = settings.MAILSERVICE_API_KEY_CACHE_SECONDS
    if not version or seconds <= 0:
        return
    if len(_entries) >= _MAX_ENTRIES:
        _entries.clear()
    _entries[prefix] = (version, time.monotonic() + seconds, api_key)


def version_start() -> None:
    """Give the keys a version when Redis has none (first use, or Redis lost it): a random one, so it
    never equals a version an old entry was read at."""
    if settings.REDIS_URL and settings.MAILSERVICE_API_KEY_CACHE_SECONDS > 0:
        try:
            shared_redis().set(VERSION_KEY, secrets.token_hex(8), nx=True)
        except redis.RedisError:
            logger.warning("API key version not started; keys are looked up on every request", exc_info=True)


def keys_changed(**_signal: Any) -> None:
    """A key or a domain changed: a new version once the change is committed."""
    if settings.REDIS_URL:
        transaction.on_commit(_version_bump)


def _version_bump() -> None:
    try:
        shared_redis().set(VERSION_KEY, secrets.token_hex(8))
    except redis.RedisError:
        # Web processes that can read Redis keep their entries until they expire.
        logger.error("API key version not changed; cached keys stay in use until they expire", exc_info=True)

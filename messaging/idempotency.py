"""Idempotent sends: POST /v1/send with an `Idempotency-Key` runs at most once per domain, sandbox and key.

A test key's keys and a live key's are apart (`is_test`): a key first used in the sandbox, where
nothing is sent, must not answer a live send with the test message's id.

The key is claimed first (a row `in_flight`, committed, so a concurrent request with the same key
sees it and gets 409 IdempotencyKeyInFlight). The send and the row's change to `done` with its
response then commit in one transaction: a key is remembered exactly when its message exists. A
failed send deletes the row, so a 4xx or 5xx can be retried with the same key. A request whose
process died between the claim and the commit left no message; its key is free again after
IN_FLIGHT_SECONDS.
"""

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from domains.models import Domain
from mailservice.errors import ApiError, ErrorCode, ValidationFailed
from messaging.models import IdempotencyKey, IdempotencyState

HEADER = "Idempotency-Key"
MAX_LENGTH = 256
KEEP_FOR = timedelta(hours=24)
IN_FLIGHT_SECONDS = 60  # above any request's duration (gunicorn's timeout is 30 s)


@dataclass(frozen=True)
class IdempotentResult:
    response: dict[str, Any]
    replayed: bool


def idempotency_key_parse(value: str | None) -> str | None:
    """The header's value if it is 1–256 printable ASCII characters; None when absent."""
    if value is None:
        return None
    if not 1 <= len(value) <= MAX_LENGTH or not all(" " <= char <= "~" for char in value):
        raise ValidationFailed(f"{HEADER}: 1 to {MAX_LENGTH} printable ASCII characters")
    return value


def request_hash(data: Any) -> str:
    """The body as parsed JSON, canonical: key order and whitespace do not make it a different request."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _claim(*, domain: Domain, is_test: bool, key: str, body_hash: str) -> IdempotencyKey | None:
    """Our new in-flight row, or None when another request holds the key."""
    now = timezone.now()
    IdempotencyKey.objects.filter(domain=domain, is_test=is_test, key=key, expires_at__lte=now).delete()
    try:
        with transaction.atomic():
            return IdempotencyKey.objects.create(
                domain=domain,
                is_test=is_test,
                key=key,
                request_hash=body_hash,
                state=IdempotencyState.IN_FLIGHT,
                expires_at=now + timedelta(seconds=IN_FLIGHT_SECONDS),
            )
    except IntegrityError:
        return None


def idempotent_send(
    *, domain: Domain, is_test: bool, key: str, body_hash: str, send: Callable[[], dict[str, Any]]
) -> IdempotentResult:
    """Run `send` (which returns the 200 response body) once per (domain, is_test, key); replay its response after.

    `is_test` is the sending key's: it has no default, so no caller can scope a test key's send as live."""
    while (claimed := _claim(domain=domain, is_test=is_test, key=key, body_hash=body_hash)) is None:
        existing = IdempotencyKey.objects.filter(domain=domain, is_test=is_test, key=key).first()
        if existing is None:
            continue  # released or expired between our INSERT and this read: claim again
        if existing.request_hash != body_hash:
            raise ApiError(
                f"{HEADER}: this key was used with a different request body in the last 24 hours",
                code=ErrorCode.IDEMPOTENCY_KEY_REUSED,
            )
        if existing.state == IdempotencyState.IN_FLIGHT:
            raise ApiError(
                f"{HEADER}: a request with this key is still being processed; retry shortly",
                code=ErrorCode.IDEMPOTENCY_KEY_IN_FLIGHT,
                headers={"Retry-After": "1"},
            )
        # Done (not in flight): the row holds the 200 body it was finished with.
        return IdempotentResult(response=existing.response or {}, replayed=True)
    try:
        with transaction.atomic():
            response = send()
            claimed.state, claimed.response = IdempotencyState.DONE, response
            claimed.expires_at = timezone.now() + KEEP_FOR
            claimed.save(update_fields=["state", "response", "expires_at", "updated_at"])
    except BaseException:
        claimed.delete()
        raise
    return IdempotentResult(response=response, replayed=False)


def idempotency_purge() -> int:
    """Delete expired keys; returns how many."""
    deleted, _ = IdempotencyKey.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted

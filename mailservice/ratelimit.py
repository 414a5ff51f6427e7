"""The per-client-IP request limit (MAILSERVICE_RATE_LIMIT), one counter for every way in.

The HTTP API counts each request, the submission SMTP server each AUTH attempt and each message,
on the same counter, so a client cannot get twice the budget by switching protocols. With
REDIS_URL the counter is in Redis, shared across processes, and counting it takes one round trip
that can also read one more key (the API keys' version, apikeys/cache.py): every API request
pays that round trip anyway. Without Redis (the embedded mode) django-ratelimit counts in the cache.

Failed credentials (the /metrics token, SMTP AUTH) have counters of their own, in the cache (Redis
with REDIS_URL, so every process sees them): `failures_wait` before checking, `failure_counted`
after a wrong one. While a key is at its limit even the right credentials are refused, or a
guesser would keep learning which guess was right.
"""

import logging
import time
from dataclasses import dataclass
from functools import cache

import redis
from django.conf import settings
from django.core.cache import cache as django_cache
from django.http import HttpRequest
from django_ratelimit.core import get_usage

logger = logging.getLogger(__name__)

_GROUP = "api"
_PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@dataclass(frozen=True)
class Counted:
    wait: int | None  # seconds to wait when over the limit, else None
    also_read: bytes | None = None  # the value of the key asked for (b"" when absent), None when unread


def client_key(_group: str, request: HttpRequest) -> str:
    """django-ratelimit's key: the client IP the caller put in REMOTE_ADDR."""
    return request.META["REMOTE_ADDR"]


@cache
def shared_redis() -> redis.Redis:
    """The Redis of REDIS_URL, for the counter and the keys read with it (called only when it is set)."""
    return redis.Redis.from_url(settings.REDIS_URL or "", socket_timeout=2, socket_connect_timeout=2)


@cache
def _rate(text: str) -> tuple[int, int]:
    """'120/m', '5/10s' → (limit, period in seconds)."""
    limit, _, period = text.partition("/")
    multiplier = period[:-1] or "1"
    return int(limit), int(multiplier) * _PERIODS[period[-1]]


def request_counted(*, ip: str) -> int | None:
    """Count one request from `ip`; the seconds to wait when it is over the limit, else None."""
    return request_counted_reading(ip=ip).wait


def request_counted_reading(*, ip: str, also_read: str | None = None) -> Counted:
    """Count one request from `ip`; with Redis, read the key `also_read` in the same round trip.

    A Redis or cache outage lets the request through (logged): it must not take the service down with it.
    """
    if not settings.REDIS_URL:
        return Counted(wait=_counted_in_cache(ip))
    limit, period = _rate(settings.MAILSERVICE_RATE_LIMIT)
    window = int(time.time()) // period
    key = f"ratelimit:{_GROUP}:{ip}:{period}:{window}"
    pipe = shared_redis().pipeline(transaction=False)
    pipe.set(key, 0, ex=period + 1, nx=True)
    pipe.incr(key)
    if also_read is not None:
        pipe.get(also_read)
    try:
        replies = pipe.execute()
    except redis.RedisError:
        logger.warning("rate limit counter unavailable; request let through", exc_info=True)
        return Counted(wait=None)
    read = (replies[2] or b"") if also_read is not None else None
    if replies[1] <= limit:
        return Counted(wait=None, also_read=read)
    return Counted(wait=max(1, (window + 1) * period - int(time.time())), also_read=read)


def _counted_in_cache(ip: str) -> int | None:
    request = HttpRequest()
    request.META["REMOTE_ADDR"] = ip
    try:
        usage = get_usage(request, group=_GROUP, key=client_key, rate=settings.MAILSERVICE_RATE_LIMIT, increment=True)
    except Exception:  # noqa: BLE001 - see request_counted
        logger.warning("rate limit counter unavailable; request let through", exc_info=True)
        return None
    if usage is None or not usage["should_limit"]:
        return None
    return max(1, int(usage["time_left"]))


def _failure_window(rate: str) -> tuple[int, int, int, int]:
    """(limit, period, the current fixed window's number, the seconds it has left)."""
    limit, period = _rate(rate)
    now = int(time.time())
    window = now // period
    return limit, period, window, max(1, (window + 1) * period - now)


def _failure_key(group: str, key: str, period: int, window: int) -> str:
    return f"failures:{group}:{key}:{period}:{window}"


def failures_wait(*, group: str, keys: list[str], rate: str) -> int | None:
    """The seconds left in the window when any of `keys` has `rate`'s number of failures in the current and
    the previous window together, else None. Two windows, not one: a fixed window alone forgot every
    failure at its end, so a guesser straddling the boundary had twice the limit (and the boundary
    made the abuse tests flaky). Any span of one period lies within the two, so it never holds more.

    A cache outage lets the attempt through (logged), as for the request limit."""
    limit, period, window, left = _failure_window(rate)
    current = {key: _failure_key(group, key, period, window) for key in keys}
    previous = {key: _failure_key(group, key, period, window - 1) for key in keys}
    try:
        counts = django_cache.get_many([*current.values(), *previous.values()])
    except Exception:  # noqa: BLE001 - see request_counted_reading
        logger.warning("failure counter unavailable; attempt let through", exc_info=True)
        return None
    over = any(counts.get(current[key], 0) + counts.get(previous[key], 0) >= limit for key in keys)
    # Asked again after `left`, a key may still be over with this window's failures: it is told to wait again.
    return left if over else None


def failure_counted(*, group: str, keys: list[str], rate: str) -> None:
    """Count one failure against each of `keys` in the current window of `rate` (kept for two windows)."""
    _, period, window, left = _failure_window(rate)
    try:
        for key in keys:
            cache_key = _failure_key(group, key, period, window)
            django_cache.add(cache_key, 0, timeout=left + period + 1)
            django_cache.incr(cache_key)
    except Exception:  # noqa: BLE001 - see request_counted_reading
        logger.warning("failure counter unavailable; failure not counted", exc_info=True)

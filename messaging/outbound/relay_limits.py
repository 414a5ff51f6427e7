"""The relay's limits, honoured by the whole fleet: a shared rate with AIMD, and a connection cap.

- Rate: a token bucket (GCRA: one "theoretical arrival time") in Redis, updated by a Lua script,
  so every worker process on every host draws from one budget. A worker asks for a permit before
  each message and sleeps for the wait it is given. MAILSERVICE_RELAY_RATE unset: no limit and
  no wait, until the relay asks to slow down. While no limit is in force a worker process asks
  Redis at most every UNLIMITED_RECHECK seconds (reporting how many messages it sent meanwhile,
  for the observed rate below) instead of before every message: that round trip was a fifth of a
  dispatch worker's time. So a slow-down reaches the fleet's other processes within that interval.
- AIMD: a "slow down" answer (421, or 451 4.7.x / 454 4.7.0) halves the effective rate for the
  fleet (at most once a second: the answers to one burst count once), from the configured rate,
  or from the rate the fleet was sending at when unlimited. Every second without one it climbs by
  MAILSERVICE_RELAY_RATE_STEP until it is back where it was, never below RATE_FLOOR.
- Connections: MAILSERVICE_RELAY_CONNECTIONS caps the open relay connections of the fleet: a
  slot (a member of a Redis sorted set that expires with the lease, so a killed worker's slot
  comes back) is held for as long as a batch's connection is open.

Without REDIS_URL (the embedded mode) the same rules hold in-process. Should Redis fail, a
worker falls back to its own in-process state until it is back: it keeps sending, within the
configured rate, rather than stopping.
"""

import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache

import redis
from django.conf import settings
from redis.exceptions import RedisError

from messaging.outbound.transports import Reply

logger = logging.getLogger(__name__)

RATE_KEY = "relay:rate"
CONNECTIONS_KEY = "relay:connections"
DECREASE_FACTOR = 0.5
DECREASE_INTERVAL = 1.0  # seconds: slow-down answers within this of a decrease count as the same one
RECOVERED = "recovered: no slow-down answer since the last decrease"
CONNECTION_POLL = 0.05  # seconds between looks for a free connection slot
UNLIMITED_RECHECK = 0.1  # seconds a process trusts Redis's "no limit in force" without asking again
UNLIMITED = "unlimited"  # the permit script's answer while no limit is in force

# KEYS[1] the rate hash. ARGV: configured rate (0 = unlimited), step, the reason of a recovery, the
# messages to count (this one and those sent unasked while unlimited). Returns the seconds to wait,
# or "unlimited" while no limit is in force.
# The effective rate `rate` is absent while no slow-down is in force; `target` is what it climbs to.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local configured, step = tonumber(ARGV[1]), tonumber(ARGV[2])
local s = redis.call('HMGET', KEYS[1], 'rate', 'tat', 'grown_at', 'target', 'win_start', 'win_count')
local rate, tat, grown_at, target = tonumber(s[1]), tonumber(s[2]) or now, tonumber(s[3]) or now, tonumber(s[4])
local counted = tonumber(ARGV[4])
local win_start, win_count = tonumber(s[5]) or now, (tonumber(s[6]) or 0) + counted
if now - win_start >= 1 then
  redis.call('HSET', KEYS[1], 'observed', tostring((win_count - counted) / (now - win_start)))
  win_start, win_count = now, counted
end
redis.call('HSET', KEYS[1], 'win_start', tostring(win_start), 'win_count', win_count)
if rate then
  rate = rate + step * (now - grown_at)
  if rate >= target then
    redis.call('HDEL', KEYS[1], 'rate', 'target')
    redis.call('HSET', KEYS[1], 'reason', ARGV[3], 'changed_at', tostring(now))
    rate = nil
  else
    redis.call('HSET', KEYS[1], 'rate', tostring(rate), 'grown_at', tostring(now))
  end
end
if not rate and configured > 0 then rate = configured end
if not rate then return 'unlimited' end
local interval = 1 / rate
tat = math.max(tat, now)
redis.call('HSET', KEYS[1], 'tat', tostring(tat + interval))
redis.call('EXPIRE', KEYS[1], 86400)
return tostring(math.max(0, tat - now - interval))
"""

# KEYS[1] the rate hash. ARGV: configured rate (0 = unlimited), floor, reason, decrease interval,
# decrease factor, messages sent since this process last asked for a permit. Returns the new rate.
_SLOW_DOWN = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local configured, floor, reason = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local s = redis.call('HMGET', KEYS[1], 'rate', 'decreased_at', 'target', 'observed', 'win_start', 'win_count')
local rate, decreased_at, target = tonumber(s[1]), tonumber(s[2]) or 0, tonumber(s[3])
if rate and now - decreased_at < tonumber(ARGV[4]) then return tostring(rate) end
if not rate then
  if configured > 0 then
    rate = configured
  else
    local span = now - (tonumber(s[5]) or now)
    local current = span > 0.2 and ((tonumber(s[6]) or 0) + tonumber(ARGV[6])) / span or 0
    rate = math.max(tonumber(s[4]) or 0, current, floor)
  end
  target = rate
end
rate = math.max(floor, rate * tonumber(ARGV[5]))
redis.call('HSET', KEYS[1], 'rate', tostring(rate), 'target', tostring(target), 'decreased_at', tostring(now),
  'grown_at', tostring(now), 'reason', reason, 'changed_at', tostring(now))
redis.call('EXPIRE', KEYS[1], 86400)
return tostring(rate)
"""

# KEYS[1] the connection set. ARGV: cap, token, slot lifetime (s). Returns 1 if the slot is taken.
_TAKE_SLOT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[2])
  redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[3])) + 1)
  return 1
end
return 0
"""


def _configured() -> float:
    return settings.MAILSERVICE_RELAY_RATE or 0.0


@dataclass
class _LocalState:
    """The same rules in-process (no Redis): what the Lua scripts keep in the `relay:rate` hash."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    rate: float | None = None
    target: float = 0.0
    tat: float = 0.0
    grown_at: float = 0.0
    decreased_at: float = 0.0
    win_start: float = 0.0
    win_count: int = 0
    observed: float = 0.0
    reason: str = ""
    changed_at: float | None = None
    slots: threading.BoundedSemaphore | None = None
    # Shared mode: until when (monotonic) Redis's "no limit in force" holds, and the messages sent since.
    unlimited_until: float = 0.0
    unreported: int = 0

    def acquire(self, now: float) -> float:
        with self.lock:
            if now - self.win_start >= 1:
                self.observed = self.win_count / (now - self.win_start) if self.win_start else 0.0
                self.win_start, self.win_count = now, 0
            self.win_count += 1
            if self.rate is not None:
                self.rate += settings.MAILSERVICE_RELAY_RATE_STEP * (now - self.grown_at)
                self.grown_at = now
                if self.rate >= self.target:
                    self.rate = None
                    self.reason, self.changed_at = RECOVERED, now
            rate = self.rate or _configured()
            if not rate:
                return 0.0
            interval = 1 / rate
            self.tat = max(self.tat, now)
            wait = max(0.0, self.tat - now - interval)
            self.tat += interval
            return wait

    def slow_down(self, now: float, reason: str) -> float:
        with self.lock:
            if self.rate is not None and now - self.decreased_at < DECREASE_INTERVAL:
                return self.rate
            if self.rate is None:
                span = now - self.win_start
                current = self.win_count / span if self.win_start and span > 0.2 else 0.0
                base = _configured() or max(self.observed, current, settings.MAILSERVICE_RELAY_RATE_FLOOR)
                self.rate = self.target = base
            self.rate = max(settings.MAILSERVICE_RELAY_RATE_FLOOR, self.rate * DECREASE_FACTOR)
            self.decreased_at = self.grown_at = self.changed_at = now
            self.reason = reason
            return self.rate


_local = _LocalState()


@cache
def shared_redis() -> redis.Redis:
    """The fleet's Redis; called only when REDIS_URL is set (without it the limits are in-process)."""
    return redis.Redis.from_url(settings.REDIS_URL or "", socket_timeout=2, socket_connect_timeout=2)


def as_text(value: bytes | str) -> str:
    """A Redis reply or an SMTP error text as str (the clients give bytes)."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


@cache
def _scripts() -> tuple:
    client = shared_redis()
    return client.register_script(_ACQUIRE), client.register_script(_SLOW_DOWN), client.register_script(_TAKE_SLOT)


def _shared() -> bool:
    return bool(settings.REDIS_URL)


def relay_permit() -> None:
    """Wait for the fleet's next permit to hand a message to the relay (returns at once while unlimited)."""
    wait = None
    if _shared():
        if not _configured():
            with _local.lock:
                if time.monotonic() < _local.unlimited_until:
                    _local.unreported += 1
                    return
                counted, _local.unreported = _local.unreported + 1, 0
        else:
            counted = 1
        try:
            args = [_configured(), settings.MAILSERVICE_RELAY_RATE_STEP, RECOVERED, counted]
            answer = as_text(_scripts()[0](keys=[RATE_KEY], args=args))
        except RedisError as exc:
            logger.warning("relay rate: Redis unavailable, limiting in-process: %s", exc)
        else:
            if answer == UNLIMITED:
                with _local.lock:
                    _local.unlimited_until = time.monotonic() + UNLIMITED_RECHECK
                return
            wait = float(answer)
    if wait is None:
        wait = _local.acquire(time.monotonic())
    if wait > 0:
        time.sleep(wait)


def is_slow_down(reply: Reply) -> bool:
    """A relay answer that asks the whole fleet to send more slowly (RFC 3463 4.7.x: policy, throttling)."""
    enhanced = reply.text.split(" ", 1)[0]
    return reply.code == 421 or (reply.code in (451, 454) and enhanced.startswith("4.7."))


def relay_slow_down(*, reply: str) -> None:
    """The relay asked to slow down: lower the fleet's rate (multiplicative decrease)."""
    reason = f"the relay answered {reply[:200]} at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
    if _shared():
        with _local.lock:  # this process asks before its next message again, and counts what it sent unasked
            unreported, _local.unreported, _local.unlimited_until = _local.unreported, 0, 0.0
        try:
            args = [
                _configured(),
                settings.MAILSERVICE_RELAY_RATE_FLOOR,
                reason,
                DECREASE_INTERVAL,
                DECREASE_FACTOR,
                unreported,
            ]
            rate = float(_scripts()[1](keys=[RATE_KEY], args=args))
        except RedisError as exc:
            logger.warning("relay rate: Redis unavailable, slowing down in-process: %s", exc)
        else:
            logger.warning("relay rate: slowing down to %.1f messages/s: %s", rate, reason)
            return
    rate = _local.slow_down(time.monotonic(), reason)
    logger.warning("relay rate: slowing down to %.1f messages/s: %s", rate, reason)


@contextmanager
def relay_connection_slot() -> Iterator[None]:
    """Hold one of the fleet's MAILSERVICE_RELAY_CONNECTIONS while the body runs (waits for a free one)."""
    cap = settings.MAILSERVICE_RELAY_CONNECTIONS
    if not cap:
        yield
        return
    if not _shared():
        with _local.lock:
            if _local.slots is None:
                _local.slots = threading.BoundedSemaphore(cap)
        with _local.slots:
            yield
        return
    token, lifetime = uuid.uuid4().hex, settings.MAILSERVICE_DISPATCH_LEASE_SECONDS
    while not _scripts()[2](keys=[CONNECTIONS_KEY], args=[cap, token, lifetime]):
        time.sleep(CONNECTION_POLL)
    try:
        yield
    finally:
        try:
            shared_redis().zrem(CONNECTIONS_KEY, token)
        except RedisError as exc:  # the slot expires with its lifetime
            logger.warning("relay connections: slot not given back: %s", exc)


def relay_rate_status() -> dict:
    """The relay's limits as they stand, for the console and metrics.

    configured: MAILSERVICE_RELAY_RATE (None: unlimited); effective: the rate in force (None:
    unlimited); reason and changed_at: the last decrease or recovery; connections: the cap;
    connections_open: the slots held now (shared mode)."""
    status: dict = {
        "configured": settings.MAILSERVICE_RELAY_RATE,
        "effective": settings.MAILSERVICE_RELAY_RATE,
        "reason": "",
        "changed_at": None,
        "connections": settings.MAILSERVICE_RELAY_CONNECTIONS,
        "connections_open": None,
    }
    if _shared():
        try:
            client = shared_redis()
            state = {as_text(key): as_text(value) for key, value in client.hgetall(RATE_KEY).items()}
            now = time.time()
            status["connections_open"] = client.zcount(CONNECTIONS_KEY, now, "+inf")
        except RedisError as exc:
            logger.warning("relay rate: status unavailable: %s", exc)
            return status
        rate = float(state["rate"]) if "rate" in state else None
        changed_at = float(state["changed_at"]) if "changed_at" in state else None
        _fill_status(
            status,
            rate=rate,
            grown_at=float(state.get("grown_at", now)),
            target=float(state.get("target", 0)),
            reason=state.get("reason", ""),
            changed_at=changed_at,
            now=now,
        )
        return status
    with _local.lock:
        now, offset = time.time(), time.time() - time.monotonic()  # the local state keeps monotonic times
        _fill_status(
            status,
            rate=_local.rate,
            grown_at=_local.grown_at + offset,
            target=_local.target,
            reason=_local.reason,
            changed_at=None if _local.changed_at is None else _local.changed_at + offset,
            now=now,
        )
    return status


def _fill_status(
    status: dict,
    *,
    rate: float | None,
    grown_at: float,
    target: float,
    reason: str,
    changed_at: float | None,
    now: float,
) -> None:
    """The effective rate and why, from the stored state (epoch seconds); a rate that has climbed back
    to its target since the last permit counts as recovered, as the next permit will record."""
    step = settings.MAILSERVICE_RELAY_RATE_STEP
    if rate is not None:
        grown = rate + step * (now - grown_at)
        if grown < target:
            status["effective"] = grown
        else:
            reason, changed_at = RECOVERED, grown_at + (target - rate) / step
    if changed_at is not None:
        status["reason"] = reason
        status["changed_at"] = datetime.fromtimestamp(changed_at, UTC)

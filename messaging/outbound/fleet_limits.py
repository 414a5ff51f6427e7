"""The relay's limits, honoured by the whole fleet: a shared rate with AIMD, and a connection cap.

- Rate: a token bucket (GCRA: one "theoretical arrival time") in Redis, updated by a Lua script,
  so every worker process on every host draws from one budget. A worker asks for a permit before
  each message and sleeps for the wait it is given. MAILSERVICE_RELAY_RATE unset: no limit and
  no wait, until the relay asks to slow down. While no limit is in force a worker process asks
  Redis at most every UNLIMITED_RECHECK seconds (reporting how many messages it sent meanwhile,
  for the observed rate below) instead of before every message: that round trip was a fifth of a
  dispatch worker's time. So a slow-down reaches the fleet's other processes within that interval.
- AIMD: a "slow down" answer (messaging/outbound/provider_rules.py) halves the effective rate for the
  fleet (at most once a second: the answers to one burst count once), from the configured rate,
  or from the rate the fleet was sending at when unlimited. Every second without one it climbs by
  MAILSERVICE_RELAY_RATE_STEP until it is back where it was, never below RATE_FLOOR.
- Connections: MAILSERVICE_RELAY_CONNECTIONS caps the open relay connections of the fleet: a
  slot (a member of a Redis sorted set that expires with the lease, so a killed worker's slot
  comes back) is held for as long as a batch's connection is open.

The same state is kept per destination in direct delivery (messaging/outbound/direct/destinations.py): the
functions below take a `destination` (RELAY, "", is the relay's own keys); a destination's rate is
unlimited until it first asks to slow down, and its connection cap is MAILSERVICE_MX_CONNECTIONS.

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

from mailservice.redis_pool import process_client
from messaging.outbound.envelope import Reply
from messaging.outbound.provider_rules import is_throttle

logger = logging.getLogger(__name__)

RELAY = ""  # the destination that stands for the relay (its keys predate destinations)
RATE_KEY = "relay:rate"
CONNECTIONS_KEY = "relay:connections"
DESTINATION_PREFIX = "destination:"  # a destination's keys: destination:<name>:rate, destination:<name>:connections
DECREASE_FACTOR = 0.5
DECREASE_INTERVAL = 1.0  # seconds: slow-down answers within this of a decrease count as the same one
RECOVERED = "recovered: no slow-down answer since the last decrease"
CONNECTION_POLL = 0.05  # seconds between looks for a free connection slot
UNLIMITED_RECHECK = 0.1  # seconds a process trusts Redis's "no limit in force" without asking again
UNLIMITED = "unlimited"  # the permit script's answer while no limit is in force

# KEYS[1] the rate hash. ARGV: configured rate (0 = unlimited), step, the reason of a recovery, the
# messages to count (this one and those sent unasked while unlimited), the longest wait to reserve
# (-1: any). Returns the seconds to wait, "unlimited" while no limit is in force, or "later:<wait>"
# when the wait is longer than that (nothing is reserved then).
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
local max_wait = tonumber(ARGV[5])
if max_wait >= 0 and tat - now - interval > max_wait then return 'later:' .. tostring(tat - now - interval) end
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


def rate_key(destination: str) -> str:
    return RATE_KEY if destination == RELAY else f"{DESTINATION_PREFIX}{destination}:rate"


def connections_key(destination: str) -> str:
    return CONNECTIONS_KEY if destination == RELAY else f"{DESTINATION_PREFIX}{destination}:connections"


def _configured(destination: str = RELAY) -> float:
    """The configured rate: the relay's MAILSERVICE_RELAY_RATE; a destination has none (AIMD alone)."""
    return (settings.MAILSERVICE_RELAY_RATE or 0.0) if destination == RELAY else 0.0


@dataclass
class _LocalState:
    """The same rules in-process (no Redis): what the Lua scripts keep in a destination's rate hash."""

    configured: float = 0.0
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

    def acquire(self, now: float, max_wait: float | None = None) -> float:
        """The wait before the next permit, reserved unless it is longer than `max_wait`."""
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
            rate = self.rate or self.configured
            if not rate:
                return 0.0
            interval = 1 / rate
            self.tat = max(self.tat, now)
            wait = max(0.0, self.tat - now - interval)
            if max_wait is not None and wait > max_wait:
                return wait
            self.tat += interval
            return wait

    def slow_down(self, now: float, reason: str) -> float:
        with self.lock:
            if self.rate is not None and now - self.decreased_at < DECREASE_INTERVAL:
                return self.rate
            if self.rate is None:
                span = now - self.win_start
                current = self.win_count / span if self.win_start and span > 0.2 else 0.0
                base = self.configured or max(self.observed, current, settings.MAILSERVICE_RELAY_RATE_FLOOR)
                self.rate = self.target = base
            self.rate = max(settings.MAILSERVICE_RELAY_RATE_FLOOR, self.rate * DECREASE_FACTOR)
            self.decreased_at = self.grown_at = self.changed_at = now
            self.reason = reason
            return self.rate


_local = _LocalState()  # the relay's
_destinations: dict[str, _LocalState] = {}  # direct delivery's, by destination
_destinations_lock = threading.Lock()


def _state(destination: str) -> _LocalState:
    """This process's state of `destination` (its configured rate refreshed: tests change the setting)."""
    if destination == RELAY:
        state = _local
    else:
        with _destinations_lock:
            state = _destinations.setdefault(destination, _LocalState())
    state.configured = _configured(destination)
    return state


def local_destinations() -> list[str]:
    """The destinations this process has state for (the console's list without Redis)."""
    with _destinations_lock:
        return sorted(_destinations)


@cache
def shared_redis() -> redis.Redis:
    """The fleet's Redis; called only when REDIS_URL is set (without it the limits are in-process).
    The process's blocking pool (mailservice/redis_pool.py): direct delivery's lanes (up to 50 threads a
    batch, 5 batches a process) raised redis-py's "Too many connections" at its default pool of 100, and a
    lane that raises leaves its message to its lease. A command answers within 2 s or fails."""
    return process_client(settings.REDIS_URL or "", socket_timeout=2, socket_connect_timeout=2)


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
    permit(RELAY)


def permit(destination: str, *, max_wait: float | None = None) -> float:
    """Wait for the fleet's next permit to send to `destination` (at once while unlimited); returns 0.

    With `max_wait`: a wait longer than that is neither taken nor slept; it is returned instead."""
    state = _state(destination)
    wait: float | None = None
    if _shared():
        if not state.configured:
            with state.lock:
                if time.monotonic() < state.unlimited_until:
                    state.unreported += 1
                    return 0.0
                counted, state.unreported = state.unreported + 1, 0
        else:
            counted = 1
        try:
            longest = -1 if max_wait is None else max_wait
            args = [state.configured, settings.MAILSERVICE_RELAY_RATE_STEP, RECOVERED, counted, longest]
            answer = as_text(_scripts()[0](keys=[rate_key(destination)], args=args))
        except RedisError as exc:
            logger.warning("%s rate: Redis unavailable, limiting in-process: %s", destination or "relay", exc)
        else:
            if answer == UNLIMITED:
                with state.lock:
                    state.unlimited_until = time.monotonic() + UNLIMITED_RECHECK
                return 0.0
            if answer.startswith("later:"):
                return float(answer.removeprefix("later:"))
            wait = float(answer)
    if wait is None:
        wait = state.acquire(time.monotonic(), max_wait)
        if max_wait is not None and wait > max_wait:
            return wait
    if wait > 0:
        time.sleep(wait)
    return 0.0


def is_slow_down(reply: Reply) -> bool:
    """An answer that asks the whole fleet to send more slowly (messaging/outbound/provider_rules.py)."""
    return is_throttle(reply)


def relay_slow_down(*, reply: str) -> None:
    """The relay asked to slow down: lower the fleet's rate (multiplicative decrease)."""
    slow_down(RELAY, reply=reply)


def slow_down(destination: str, *, reply: str) -> float:
    """`destination` (the relay, RELAY) asked to slow down: lower the fleet's rate to it (multiplicative
    decrease); returns the new rate."""
    who = "the relay" if destination == RELAY else destination
    reason = f"{who} answered {reply[:200]} at {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
    state = _state(destination)
    if _shared():
        with state.lock:  # this process asks before its next message again, and counts what it sent unasked
            unreported, state.unreported, state.unlimited_until = state.unreported, 0, 0.0
        try:
            args = [
                state.configured,
                settings.MAILSERVICE_RELAY_RATE_FLOOR,
                reason,
                DECREASE_INTERVAL,
                DECREASE_FACTOR,
                unreported,
            ]
            rate = float(_scripts()[1](keys=[rate_key(destination)], args=args))
        except RedisError as exc:
            logger.warning("%s rate: Redis unavailable, slowing down in-process: %s", who, exc)
        else:
            logger.warning("%s rate: slowing down to %.1f messages/s: %s", who, rate, reason)
            return rate
    rate = state.slow_down(time.monotonic(), reason)
    logger.warning("%s rate: slowing down to %.1f messages/s: %s", who, rate, reason)
    return rate


def take_slot(destination: str, cap: int, *, wait: float) -> str | None:
    """One of the fleet's `cap` connections to `destination`, waiting at most `wait` seconds for one
    to come free: a token for `give_back_slot`, or None."""
    deadline = time.monotonic() + wait
    if not _shared():
        state = _state(destination)
        with state.lock:
            if state.slots is None:
                state.slots = threading.BoundedSemaphore(cap)
        return "local" if state.slots.acquire(timeout=max(0.0, wait)) else None
    token, lifetime = uuid.uuid4().hex, settings.MAILSERVICE_DISPATCH_LEASE_SECONDS
    while not _scripts()[2](keys=[connections_key(destination)], args=[cap, token, lifetime]):
        if time.monotonic() >= deadline:
            return None
        time.sleep(CONNECTION_POLL)
    return token


def give_back_slot(destination: str, token: str) -> None:
    if not _shared():
        slots = _state(destination).slots
        if slots is not None:
            slots.release()
        return
    try:
        shared_redis().zrem(connections_key(destination), token)
    except RedisError as exc:  # the slot expires with its lifetime
        logger.warning("%s connections: slot not given back: %s", destination or "relay", exc)


@contextmanager
def relay_connection_slot() -> Iterator[None]:
    """Hold one of the fleet's MAILSERVICE_RELAY_CONNECTIONS while the body runs (waits for a free one)."""
    cap = settings.MAILSERVICE_RELAY_CONNECTIONS
    if not cap:
        yield
        return
    token = take_slot(RELAY, cap, wait=float("inf"))
    assert token is not None  # an endless wait ends with a slot
    try:
        yield
    finally:
        give_back_slot(RELAY, token)


def relay_rate_status() -> dict:
    """The relay's limits as they stand, for the console and metrics.

    configured: MAILSERVICE_RELAY_RATE (None: unlimited); effective: the rate in force (None:
    unlimited); reason and changed_at: the last decrease or recovery; connections: the cap;
    connections_open: the slots held now (shared mode)."""
    return rate_status(RELAY, cap=settings.MAILSERVICE_RELAY_CONNECTIONS)


def rate_status(destination: str, *, cap: int | None) -> dict:
    """`destination`'s limits as they stand (relay_rate_status's fields), and its stored details
    (`details`: the rate hash's other fields, e.g. the MX hosts and the last error)."""
    configured = _configured(destination) or None
    status: dict = {
        "configured": configured,
        "effective": configured,
        "reason": "",
        "changed_at": None,
        "connections": cap,
        "connections_open": None,
        "details": {},
    }
    if _shared():
        try:
            client = shared_redis()
            state = {as_text(key): as_text(value) for key, value in client.hgetall(rate_key(destination)).items()}
            now = time.time()
            status["connections_open"] = client.zcount(connections_key(destination), now, "+inf")
        except RedisError as exc:
            logger.warning("%s rate: status unavailable: %s", destination or "relay", exc)
            return status
        status["details"] = state
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
    local = _state(destination)
    with local.lock:
        now, offset = time.time(), time.time() - time.monotonic()  # the local state keeps monotonic times
        _fill_status(
            status,
            rate=local.rate,
            grown_at=local.grown_at + offset,
            target=local.target,
            reason=local.reason,
            changed_at=None if local.changed_at is None else local.changed_at + offset,
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

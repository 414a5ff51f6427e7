"""Connection discipline: a destination that refused is spaced, fleet-wide, until it accepts again.

Guarantee. After a destination refuses (a 421 or other 4xx greeting, a refused or reset connection,
"too many connections", or a slow-down reply to a transaction: messaging/outbound/provider_rules.py):
- nothing is sent to it until its spacing has passed: its messages stay queued, put back without an
  attempt (`spacing_of`), instead of each reconnecting;
- at most one new connection is opened to it per spacing, fleet-wide (`claim_connection`); a session
  already open carries as many transactions as the receiver accepts, so the spacing costs connections,
  not messages per connection.
The spacing starts at MAILSERVICE_MX_SPACING_BASE, doubles at each refusal up to MAILSERVICE_MX_SPACING_MAX
(a refusal while it is paused does not double it: that connection or transaction began before the pause),
and halves once for each spacing that passes with deliveries and no refusal; under the base the destination
is free again. Against a receiver that counts per time window (Postfix's anvil), the doubling finds the
window, and after a success the halving and the next refusal's doubling bring the spacing back to that
window at once: each later window costs one refusal, not a search (docs/delivery.md#connection-discipline).

Shared state. One Redis hash per destination, `destination:<name>:spacing` (interval, paused_until,
connect_at, refused_at, eased_at, reason), changed only by the Lua scripts below on Redis's clock, so
every worker process on every host sees one spacing; it expires four spacings (at least a minute) after
the last refusal or easing. A process keeps none of it, only reads.

Failure mode. With Redis unreachable (or without REDIS_URL, the embedded mode) each process spaces on its
own (the same rules in-process): the fleet as a whole may then open one connection per process per
spacing, and without Redis the one-connection-at-a-time cap of a spaced destination is not applied (the
in-process connection slots keep the cap they were made with, messaging/outbound/fleet_limits.py).
Nothing is lost either way: a message put back keeps its attempts and is due when the spacing ends.
"""

import logging
import threading
import time
from dataclasses import dataclass
from functools import cache

from django.conf import settings
from redis.exceptions import RedisError

from messaging.outbound.fleet_limits import DESTINATION_PREFIX, as_text, shared_redis

logger = logging.getLogger(__name__)


# KEYS[1] the hash. ARGV: base, max, reason. Returns the spacing in force.
_REFUSED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local base, cap = tonumber(ARGV[1]), tonumber(ARGV[2])
local s = redis.call('HMGET', KEYS[1], 'interval', 'paused_until')
local interval, paused_until = tonumber(s[1]) or 0, tonumber(s[2]) or 0
if interval == 0 then
  interval = base
elseif now >= paused_until then
  interval = math.min(cap, interval * 2)
end
redis.call('HSET', KEYS[1], 'interval', tostring(interval), 'paused_until', tostring(now + interval),
  'connect_at', tostring(now + interval), 'refused_at', tostring(now), 'reason', ARGV[3])
redis.call('EXPIRE', KEYS[1], math.max(60, math.ceil(interval * 4)))
return tostring(interval)
"""

# KEYS[1] the hash. Returns the seconds until a new connection may be opened (0: this one, claimed).
_CLAIM = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'interval', 'connect_at')
local interval, connect_at = tonumber(s[1]), tonumber(s[2]) or 0
if not interval then return '0' end
if now < connect_at then return tostring(connect_at - now) end
redis.call('HSET', KEYS[1], 'connect_at', tostring(now + interval))
return '0'
"""

# KEYS[1] the hash. ARGV: base. A delivery: the spacing halves once a spacing after the last change.
_SUCCEEDED = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local s = redis.call('HMGET', KEYS[1], 'interval', 'refused_at', 'eased_at')
local interval = tonumber(s[1])
if not interval then return '0' end
if now - math.max(tonumber(s[2]) or 0, tonumber(s[3]) or 0) < interval then return tostring(interval) end
interval = interval / 2
if interval < tonumber(ARGV[1]) then
  redis.call('DEL', KEYS[1])
  return '0'
end
redis.call('HSET', KEYS[1], 'interval', tostring(interval), 'eased_at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.max(60, math.ceil(interval * 4)))
return tostring(interval)
"""


def spacing_key(destination: str) -> str:
    return f"{DESTINATION_PREFIX}{destination}:spacing"


@dataclass
class _Spacing:
    """The same state in-process (no Redis), on time.time()."""

    interval: float = 0.0
    paused_until: float = 0.0
    connect_at: float = 0.0
    refused_at: float = 0.0
    eased_at: float = 0.0
    reason: str = ""


_local: dict[str, _Spacing] = {}
_local_lock = threading.Lock()


@cache
def _scripts() -> tuple:
    client = shared_redis()
    return client.register_script(_REFUSED), client.register_script(_CLAIM), client.register_script(_SUCCEEDED)


def _base() -> float:
    return settings.MAILSERVICE_MX_SPACING_BASE


def refused(destination: str, *, reason: str) -> float:
    """`destination` refused a connection or asked to slow down: space it (doubling); returns the spacing."""
    if settings.REDIS_URL:
        try:
            args = [_base(), settings.MAILSERVICE_MX_SPACING_MAX, reason[:200]]
            interval = float(_scripts()[0](keys=[spacing_key(destination)], args=args))
        except RedisError as exc:
            logger.warning("spacing of %s: Redis unavailable, spacing in-process: %s", destination, exc)
        else:
            logger.info("destination %s spaced %.1f s: %s", destination, interval, reason)
            return interval
    now = time.time()
    with _local_lock:
        state = _local.setdefault(destination, _Spacing())
        if not state.interval:
            state.interval = _base()
        elif now >= state.paused_until:
            state.interval = min(settings.MAILSERVICE_MX_SPACING_MAX, state.interval * 2)
        state.paused_until = state.connect_at = now + state.interval
        state.refused_at, state.reason = now, reason[:200]
        return state.interval


@dataclass(frozen=True)
class Spaced:
    """A destination's spacing as it stands: `wait` seconds (0 once passed) until it may be sent to again."""

    interval: float
    wait: float
    reason: str

    @property
    def why(self) -> str:
        return f"spaced {self.interval:.1f} s after {self.reason}"


def spacing_of(destination: str) -> Spaced | None:
    """The destination's spacing, or None while it has none (it never refused, or has eased back)."""
    now = time.time()
    if settings.REDIS_URL:
        try:
            values = shared_redis().hmget(spacing_key(destination), ["interval", "paused_until", "reason"])
        except RedisError as exc:
            logger.warning("spacing of %s: Redis unavailable, reading this process's: %s", destination, exc)
        else:
            interval, until, reason = values
            if interval is None:
                return None
            return Spaced(float(interval), max(0.0, float(until or 0) - now), as_text(reason or b""))
    with _local_lock:
        state = _local.get(destination)
        if state is None:
            return None
        return Spaced(state.interval, max(0.0, state.paused_until - now), state.reason)


def claim_connection(destination: str) -> float:
    """Claim the one new connection a spaced destination allows per spacing: 0 when it may be opened now
    (claimed, or the destination is not spaced), else the seconds until one may."""
    if settings.REDIS_URL:
        try:
            return float(_scripts()[1](keys=[spacing_key(destination)]))
        except RedisError as exc:
            logger.warning("spacing of %s: Redis unavailable, claiming in-process: %s", destination, exc)
    now = time.time()
    with _local_lock:
        state = _local.get(destination)
        if state is None:
            return 0.0
        if now < state.connect_at:
            return state.connect_at - now
        state.connect_at = now + state.interval
        return 0.0


def succeeded(destination: str) -> None:
    """A delivery to a spaced destination: its spacing eases (halves once per spacing of successes)."""
    if settings.REDIS_URL:
        try:
            _scripts()[2](keys=[spacing_key(destination)], args=[_base()])
            return
        except RedisError as exc:
            logger.warning("spacing of %s: Redis unavailable, easing in-process: %s", destination, exc)
    now = time.time()
    with _local_lock:
        state = _local.get(destination)
        if state is None or now - max(state.refused_at, state.eased_at) < state.interval:
            return
        state.interval /= 2
        state.eased_at = now
        if state.interval < _base():
            del _local[destination]

"""Which source address a direct delivery leaves from: its domain's pool, within the warm-up caps.

The addresses (MAILSERVICE_SOURCE_ADDRESSES) and their EHLO names come from the configuration; the
database holds the pools domains are assigned to (`SourcePool`) and each address's warm-up state
(`SourceAddress`). An address a pool names that is no longer configured is left out of the pool until
it is configured again (`domain_pools`).

Warm-up (MAILSERVICE_WARMUP=N): an address sends at most N messages per destination on its first UTC
day of warm-up, 2N on the second, 4N on the third…; once that cap passes MAILSERVICE_WARMUP_CEILING the
address is warm. Its first day is the day it first sends (`SourceAddress.warmup_started`, kept in the
database so that restarts, a Redis flush and every worker agree on it, and an operator can mark an
address warm or move its start); counting it from the first send, not from when it was configured,
means an address configured ahead of use loses no warm-up day.

The counts per (address, destination, UTC day) are shared by every worker process: a Redis counter
per key, reserved before the send with one atomic script (so two workers never both take the last
message of a cap) and expiring after two days; in-process while REDIS_URL is unset or Redis is
unreachable, as messaging/outbound/fleet_limits.py does. A message counts when its transaction is begun, sent or not.

`choose_source` fills the warming addresses first (they need the traffic), then sends the overflow
through the pool's warm addresses; when none has room it answers None and the message waits, without
using an attempt, for the next UTC day (`next_try`).
"""

import logging
import random
import threading
from collections import Counter
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from functools import cache

from django.conf import settings
from redis.exceptions import RedisError

from domains.models import Domain, SourceAddress
from messaging.outbound.envelope import NotSent, Pool, Reply, SendResult, Source
from messaging.outbound.fleet_limits import shared_redis
from messaging.outbound.smtp_client import helo_name

logger = logging.getLogger(__name__)

ALL = "all"  # the pool of a domain assigned to none: every configured address

KEY_PREFIX = "warmup"
KEY_TTL = 2 * 86400  # seconds: a day's counters outlive the day, for the console, then go
# While a pool is full, a message is looked at again after this at the latest, before the next UTC day:
# an operator who marks an address warm or adds one to the pool should not wait until midnight.
RECHECK = timedelta(hours=1)

# KEYS[1] the (address, destination, day) count, KEYS[2] the (address, day) total. ARGV: the cap
# (-1: none), the keys' lifetime. Returns 1 if the message is counted, 0 if the cap is reached.
_RESERVE = """
local cap = tonumber(ARGV[1])
local count = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if cap >= 0 and count > cap then
  redis.call('DECR', KEYS[1])
  return 0
end
redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return 1
"""


def configured_addresses() -> dict[str, str]:
    """{address: its EHLO name, "" for the default}, as MAILSERVICE_SOURCE_ADDRESSES gives them."""
    return dict(settings.MAILSERVICE_SOURCE_ADDRESSES)


def domain_pools(*, domain_ids: Iterable[int]) -> dict[int, Pool]:
    """Each domain's pool, in one query; {} while no source address is configured (the system chooses)."""
    configured = configured_addresses()
    if not configured:
        return {}
    rows = {row.address: row for row in source_address_rows(configured)}
    everything = Pool(ALL, tuple(configured), tuple(rows.values()))
    pools: dict[int, Pool] = {}
    for domain in Domain.objects.filter(pk__in=set(domain_ids)).select_related("source_pool"):
        chosen = domain.source_pool
        if chosen is None:
            pools[domain.pk] = everything
        else:
            addresses = tuple(a for a in configured if a in set(chosen.addresses))
            pools[domain.pk] = Pool(chosen.name, addresses, tuple(rows[a] for a in addresses))
    return pools


def source_address_rows(addresses: Iterable[str]) -> list[SourceAddress]:
    """The warm-up rows of `addresses`, in their order, made for those that have none yet."""
    wanted = list(addresses)
    rows = {row.address: row for row in SourceAddress.objects.filter(address__in=wanted)}
    missing = [SourceAddress(address=address) for address in wanted if address not in rows]
    if missing:
        SourceAddress.objects.bulk_create(missing, ignore_conflicts=True)  # another worker may make them too
        rows = {row.address: row for row in SourceAddress.objects.filter(address__in=wanted)}
    return [rows[address] for address in wanted]


def source_of(row: SourceAddress) -> Source:
    """The address with its EHLO name: its own from MAILSERVICE_SOURCE_ADDRESSES, else the service's."""
    return Source(row.address, configured_addresses().get(row.address) or helo_name())


def today() -> date:
    return datetime.now(UTC).date()


def warmup_cap(row: SourceAddress, day: date) -> int | None:
    """Messages per destination `row` may send on `day`; None once it is warm (or without warm-up)."""
    start = settings.MAILSERVICE_WARMUP
    if not start or row.warm:
        return None
    if row.warmup_started is None:
        return start  # its first send starts day 1
    cap = start * 2 ** max(0, (day - row.warmup_started).days)
    return None if cap > settings.MAILSERVICE_WARMUP_CEILING else cap


def next_try() -> datetime:
    """When a message held back by a full pool is looked at again: the next UTC day, or RECHECK from now."""
    now = datetime.now(UTC)
    tomorrow = datetime.combine(now.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
    return min(tomorrow, now + RECHECK)


def _keys(address: str, destination: str, day: date) -> tuple[str, str]:
    return f"{KEY_PREFIX}:{day.isoformat()}:{address}:{destination}", f"{KEY_PREFIX}:{day.isoformat()}:{address}"


class _LocalCounts:
    """The counters in-process (no Redis): the same keys, forgotten when the day changes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: Counter[str] = Counter()
        self.day: date | None = None

    def reserve(self, keys: tuple[str, str], cap: int | None, day: date) -> bool:
        with self.lock:
            if self.day != day:
                self.counts.clear()
                self.day = day
            if cap is not None and self.counts[keys[0]] >= cap:
                return False
            self.counts.update(keys)
            return True


_local = _LocalCounts()


@cache
def _reserve_script():  # type: ignore[no-untyped-def]  # redis-py's Script is untyped
    return shared_redis().register_script(_RESERVE)


def _reserve(address: str, destination: str, cap: int | None, day: date) -> bool:
    """Count one message from `address` to `destination` today, unless `cap` is reached."""
    keys = _keys(address, destination, day)
    if settings.REDIS_URL:
        try:
            return bool(_reserve_script()(keys=list(keys), args=[-1 if cap is None else cap, KEY_TTL]))
        except RedisError as exc:
            logger.warning("warm-up counts: Redis unavailable, counting in-process: %s", exc)
    return _local.reserve(keys, cap, day)


def _started(row: SourceAddress, day: date) -> None:
    """Its warm-up begins today, its first send (a conditional write: the first worker's day stands)."""
    if settings.MAILSERVICE_WARMUP and not row.warm and row.warmup_started is None:
        SourceAddress.objects.filter(pk=row.pk, warmup_started__isnull=True).update(warmup_started=day)
        row.refresh_from_db(fields=["warmup_started"])


def choose_source(pool: list[SourceAddress], destination: str, *, past_cap: bool = False) -> SourceAddress | None:
    """The address of `pool` a message to `destination` leaves from, counted; None if every one is at its cap.

    Warming addresses with room first, then the warm ones, each group shuffled to spread the load.
    `past_cap`: part of the message has already left, so the rest follows: when no address has room,
    the first warming one takes it beyond its cap."""
    day = today()
    warming = [row for row in pool if warmup_cap(row, day) is not None]
    warm = [row for row in pool if warmup_cap(row, day) is None]
    random.shuffle(warming)
    random.shuffle(warm)
    for row in [*warming, *warm]:
        if _reserve(row.address, destination, warmup_cap(row, day), day):
            _started(row, day)
            return row
    if past_cap and warming:
        _reserve(warming[0].address, destination, None, day)
        _started(warming[0], day)
        return warming[0]
    return None


def counts_today(addresses: Iterable[str]) -> dict[str, int]:
    """Messages each address has begun today, summed over destinations (for the console)."""
    wanted = list(addresses)
    day = today()
    totals = [_keys(address, "", day)[1] for address in wanted]
    if settings.REDIS_URL:
        try:
            values = shared_redis().mget(totals) if totals else []
            return {address: int(value or 0) for address, value in zip(wanted, values, strict=True)}
        except RedisError as exc:
            logger.warning("warm-up counts: Redis unavailable, showing this process's: %s", exc)
    with _local.lock:
        same_day = _local.day == day
        return {address: _local.counts[key] if same_day else 0 for address, key in zip(wanted, totals, strict=True)}


class PoolFull(Exception):
    """No address of the message's pool may send it now (warm-up caps): nothing is begun."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.result = SendResult(final=Reply(451, f"4.7.0 not sent: {why}"), not_sent=NotSent(why, next_try()))


def source_past_cap(pool: list[SourceAddress], destination: str) -> SourceAddress:
    row = choose_source(pool, destination, past_cap=True)
    assert row is not None  # past_cap always takes one of a pool that has addresses
    return row

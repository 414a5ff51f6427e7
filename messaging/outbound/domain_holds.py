"""Per-destination backoff: a recipient domain the relay defers waits as a group, others flow on.

A temporary refusal naming recipients (a 4xx answer to RCPT TO: 450, 451, 452, 421) holds their
domain at once; temporary failures of whole messages to one domain (a 4xx to DATA that is not a
relay-wide "slow down", see messaging/outbound/fleet_limits.py) hold it after STRIKES in a row. The n-th hold
in a row lasts MAILSERVICE_DESTINATION_BACKOFF_BASE * 2^(n-1) seconds (at most BACKOFF_MAX); a
delivery to the domain ends the streak. While a domain is held, its claimed messages are put back
until the hold ends without using an attempt; the message whose failure started the hold is
retried then too. Failures of messages already at the relay when a hold starts do not lengthen it.
Greylisting (messaging/outbound/greylisting.py) is about one triplet, not the domain: it holds nothing.

The holds live in a Redis hash shared by the fleet (in-process without REDIS_URL or while Redis
is unreachable); each batch reads its recipients' domains once, like the suppression list.
"""

import json
import logging
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from django.conf import settings
from redis.exceptions import RedisError

from messaging.outbound.envelope import Reply, SendResult
from messaging.outbound.fleet_limits import as_text, is_slow_down, shared_redis
from messaging.outbound.greylisting import is_greylisting

logger = logging.getLogger(__name__)

KEY = "relay:destinations"
STRIKES = 3  # whole-message temporary failures in a row that hold a domain


@dataclass
class Hold:
    failures: int  # temporary failures in a row
    until: float  # epoch seconds; 0 while not held (strikes counted, not yet held)
    reply: str  # the relay's answer that started the hold

    @property
    def active(self) -> bool:
        return self.until > time.time()


_local: dict[str, Hold] = {}
_local_lock = threading.Lock()


def _domain(address: str) -> str:
    return address.rpartition("@")[2].lower()


def _load(domains: Iterable[str]) -> dict[str, Hold]:
    names = sorted(set(domains))
    if not names:
        return {}
    if settings.REDIS_URL:
        try:
            values = shared_redis().hmget(KEY, names)
        except RedisError as exc:
            logger.warning("destination holds: Redis unavailable, using this process's: %s", exc)
        else:
            return {name: Hold(**json.loads(value)) for name, value in zip(names, values, strict=True) if value}
    with _local_lock:
        return {name: _local[name] for name in names if name in _local}


def _save(holds: dict[str, Hold | None]) -> None:
    if settings.REDIS_URL:
        try:
            pipe = shared_redis().pipeline()
            for name, hold in holds.items():
                if hold is None:
                    pipe.hdel(KEY, name)
                else:
                    pipe.hset(KEY, name, json.dumps(asdict(hold)))
            pipe.execute()
            return
        except RedisError as exc:
            logger.warning("destination holds: Redis unavailable, keeping them in this process: %s", exc)
    with _local_lock:
        for name, hold in holds.items():
            if hold is None:
                _local.pop(name, None)
            else:
                _local[name] = hold


def _hold_seconds(failures: int) -> float:
    base = settings.MAILSERVICE_DESTINATION_BACKOFF_BASE * 2 ** (failures - 1)
    return min(base, settings.MAILSERVICE_DESTINATION_BACKOFF_MAX)


def _holds(reply: Reply) -> bool:
    """A deferral that counts toward its domain's hold: a 4xx, but no greylisting, which is about its own
    triplet (messaging/outbound/greylisting.py)."""
    return 400 <= reply.code < 500 and not is_greylisting(reply)


class BatchHolds:
    """The holds on a batch's recipient domains, read once, updated as the relay answers."""

    def __init__(self, recipients: Iterable[str]) -> None:
        self.holds = _load(_domain(address) for address in recipients)

    def held_until(self, recipients: Iterable[str]) -> tuple[datetime, str] | None:
        """When the last hold on these recipients' domains ends, and why; None when none is held."""
        active = [
            (hold.until, hold.reply, name)
            for name in {_domain(r) for r in recipients}
            if (hold := self.holds.get(name)) and hold.active
        ]
        if not active:
            return None
        until, reply, name = max(active)
        return datetime.fromtimestamp(until, UTC), f"{name} is held after the relay answered {reply}"

    def observe(self, result: SendResult, recipients: list[str]) -> datetime | None:
        """Record what the relay answered for `recipients`; returns the end of a hold it started or extended."""
        changes: dict[str, Hold | None] = {}
        named = {_domain(address): reply for address, reply in result.refused.items() if _holds(reply)}
        if result.delivered:
            delivered = {_domain(address) for address in result.accepted} - set(named)
            changes.update((name, None) for name in delivered if name in self.holds)
        elif _holds(result.final) and not is_slow_down(result.final):
            # The whole message failed (MAIL FROM or DATA): counts against its domain if it has only one.
            failing = {_domain(address) for address in result.accepted or recipients} - set(named)
            if len(failing) == 1:
                [name] = failing
                self._count(changes, name, str(result.final), named=False)
        for name, reply in named.items():
            self._count(changes, name, str(reply), named=True)
        if not changes:
            return None
        _save(changes)
        for name, hold in changes.items():
            if hold is None:
                self.holds.pop(name, None)
            else:
                self.holds[name] = hold
        ends = [hold.until for hold in changes.values() if hold is not None and hold.active]
        return datetime.fromtimestamp(max(ends), UTC) if ends else None

    def _count(self, changes: dict[str, Hold | None], name: str, reply: str, *, named: bool) -> None:
        """One more failure for `name`, unless a hold is running (mail already at the relay when it began)."""
        hold = self.holds.get(name) or Hold(0, 0, "")
        if hold.active:
            return
        failures = hold.failures + 1
        if not named and failures < STRIKES:
            changes[name] = Hold(failures, 0, reply[:200])
            return
        logger.warning("destination %s held for %.0f s: the relay answered %s", name, _hold_seconds(failures), reply)
        changes[name] = Hold(failures, time.time() + _hold_seconds(failures), reply[:200])


def held_destinations() -> dict[str, dict]:
    """Recipient domains held now: {domain: {"until": datetime, "failures": n, "reply": str}} (console, metrics)."""
    if settings.REDIS_URL:
        try:
            raw = {as_text(name): Hold(**json.loads(value)) for name, value in shared_redis().hgetall(KEY).items()}
        except RedisError as exc:
            logger.warning("destination holds: status unavailable: %s", exc)
            raw = {}
    else:
        with _local_lock:
            raw = dict(_local)
    return {
        name: {"until": datetime.fromtimestamp(hold.until, UTC), "failures": hold.failures, "reply": hold.reply}
        for name, hold in sorted(raw.items())
        if hold.active
    }

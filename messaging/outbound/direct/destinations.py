"""Direct delivery's destinations, and the limits each one is sent within.

A destination is where a recipient domain's mail physically goes: the sorted set of its MX hosts'
registrable domains (the Public Suffix List, as bundled by the `publicsuffixlist` package: nothing
is downloaded at run time), joined by commas. So gmail.com (gmail-smtp-in.l.google.com) and every
Google Workspace domain (aspmx.l.google.com, alt1.aspmx.l.google.com, …) are one destination,
"google.com", and so are all the tenants of outlook.com's `*.mail.protection.outlook.com`. A domain
without MX records (implicit MX) is its own destination. The registrable domain rather than the
host set: providers give each customer other host names (Microsoft: one per tenant) in front of one
pool of servers, and their limits are per sending IP over that pool.

Per destination, shared by the fleet through Redis (messaging/outbound/fleet_limits.py, keys
`destination:<name>:…`; in-process without it):
- a connection cap, MAILSERVICE_MX_CONNECTIONS, summed over the destination's MX hosts: a batch
  takes a slot for each session it opens and gives it back when the session closes. A batch that
  finds none free within CONNECTION_WAIT puts the recipient back without using an attempt;
- the AIMD rate: unlimited until the destination answers "slow down" (the rule table,
  messaging/outbound/provider_rules.py) at any stage, which halves it; a permit further away than
  RATE_WAIT puts the recipient back until then rather than holding the worker's thread;
- its spacing after a refusal (messaging/outbound/direct/spacing.py): a slow-down reply, a refused,
  reset or 4xx-greeted connection pauses it and allows one new connection per spacing, and one
  connection open at a time until the spacing has eased away;
- what the console shows (`destination_list`): the MX hosts last routed to and the last error,
  kept in the destination's rate hash (a process writes the hosts at most once per NOTE_SECONDS
  unless they change); the destinations used in the last day are in INDEX_KEY.
"""

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache

from django.conf import settings
from publicsuffixlist import PublicSuffixList
from redis.exceptions import RedisError

from messaging.outbound.direct import spacing
from messaging.outbound.envelope import NotSent, SendResult
from messaging.outbound.fleet_limits import (
    as_text,
    give_back_slot,
    local_destinations,
    permit,
    rate_key,
    rate_status,
    shared_redis,
    slow_down,
    take_slot,
)
from messaging.outbound.provider_rules import is_throttle

logger = logging.getLogger(__name__)

INDEX_KEY = "destination:index"  # sorted set: destination -> when a batch last routed to it (epoch s)
INDEX_DAYS = 1  # the console lists the destinations used within this many days
CONNECTION_WAIT = 0.5  # seconds a worker waits for a free connection slot before putting the recipient back
RATE_WAIT = 1.0  # the longest permit wait a worker sleeps; a longer one puts the recipient back until then
THROTTLE_RETRY_SECONDS = 1.0  # a recipient put back at the connection cap is due again this much later
_ERROR_CHARS = 300
NOTE_SECONDS = 60.0  # a process records a destination's MX hosts and TLS policy at most this often


@cache
def _suffixes() -> PublicSuffixList:
    return PublicSuffixList()  # the list the package bundles; loaded once per process (~60 ms)


def public_suffixes_load() -> None:
    """Load the public suffix list now: a direct-delivery worker does it at start, not in its first batch,
    where it held the GIL for up to 0.6 s of each process's first seconds on a busy machine (py-spy)."""
    _suffixes()


def destination_of(domain: str, hosts: list[str]) -> str:
    """The destination of `domain` (an A-label) routed to `hosts`: its MX hosts' registrable domains."""
    if hosts == [domain]:
        return domain
    return ",".join(sorted({_suffixes().privatesuffix(host) or host for host in hosts}))


def _after(seconds: float) -> datetime:
    return datetime.now(UTC) + timedelta(seconds=seconds)


@dataclass
class _Details:
    """What the console shows besides the rate, kept in-process without Redis."""

    mx_hosts: str = ""
    tls_policy: str = ""
    last_error: str = ""
    last_error_at: float = 0.0
    used_at: float = 0.0


_local: dict[str, _Details] = {}
_local_lock = threading.Lock()


def _remember(destination: str, **fields: str | float) -> None:
    """Store console details of `destination` with its rate state (and list it in INDEX_KEY)."""
    if settings.REDIS_URL:
        try:
            pipe = shared_redis().pipeline()
            pipe.hset(rate_key(destination), mapping={name: str(value) for name, value in fields.items()})
            pipe.expire(rate_key(destination), 86400)
            pipe.zadd(INDEX_KEY, {destination: time.time()})
            pipe.execute()
            return
        except RedisError as exc:
            logger.warning("destination %s: details not stored: %s", destination, exc)
    with _local_lock:
        details = _local.setdefault(destination, _Details())
        for name, value in fields.items():
            setattr(details, name, value)
        details.used_at = time.time()


class _NotedRecently:
    """When this process last recorded each destination's console details, and for which MX hosts.

    Recording them is a Redis pipeline of three commands, and the TLS policy it names two cache reads:
    once a batch, that was 9.7% of direct delivery's worker CPU in the isolation bench, where a batch
    has one message per destination. So a process records them again only after NOTE_SECONDS, or at
    once when the hosts changed; the console's TLS policy and "last used" may be that much behind."""

    def __init__(self) -> None:
        self._noted: dict[str, tuple[float, tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def due(self, destination: str, hosts: list[str]) -> bool:
        with self._lock:
            noted = self._noted.get(destination)
        return noted is None or noted[1] != tuple(sorted(hosts)) or time.monotonic() - noted[0] >= NOTE_SECONDS

    def stamp(self, destination: str, hosts: list[str]) -> None:
        with self._lock:  # sorted: hosts of equal preference come in a new order each batch
            self._noted[destination] = (time.monotonic(), tuple(sorted(hosts)))

    def clear(self) -> None:
        """Forget every stamp (the tests clear Redis between tests)."""
        with self._lock:
            self._noted.clear()


noted_recently = _NotedRecently()


@dataclass
class DestinationGate:
    """A batch's side of the destinations' limits: admission (the rate), connection slots, and what
    the receivers answered (a slow-down lowers the rate, an error is remembered)."""

    noted: set[str] = field(default_factory=set)
    spaced: set[str] = field(default_factory=set)  # destinations found spaced by this batch: a delivery eases them

    def note_due(self, destination: str, hosts: list[str]) -> bool:
        """Whether this batch is to `note` the destination: not yet by this batch, and not by this
        process within NOTE_SECONDS for these hosts."""
        if destination in self.noted:
            return False
        if noted_recently.due(destination, hosts):
            return True
        self.noted.add(destination)
        return False

    def note(self, destination: str, hosts: list[str], *, tls_policy: str = "") -> None:
        """The destination is used by this batch: record its MX hosts and the TLS policy of the recipient
        domain that used it first (as last found: tls_policy.destination_tls_policy) once."""
        if destination not in self.noted:
            self.noted.add(destination)
            _remember(destination, mx_hosts=" ".join(hosts), tls_policy=tls_policy)
            noted_recently.stamp(destination, hosts)

    def admit(self, destination: str, *, follows: bool = False) -> NotSent | None:
        """A permit of the destination's rate (slept for up to RATE_WAIT), or why the recipients go back.
        A transaction that `follows` one of the message already begun waits for its permit, however long,
        and goes through a spacing (messaging/outbound/direct/spacing.py); any other waits the spacing out, queued."""
        if (spaced := spacing.spacing_of(destination)) is not None:
            self.spaced.add(destination)
            if spaced.wait > 0 and not follows:
                return NotSent(f"{destination} is {spaced.why}", until=_after(spaced.wait))
        wait = permit(destination, max_wait=None if follows else RATE_WAIT)
        if not wait:
            return None
        return NotSent(f"{destination} is at its rate: next permit in {wait:.1f} s", until=_after(wait))

    def take_slot(self, destination: str, *, wait: float = CONNECTION_WAIT) -> str | None:
        """A connection slot (a token), or None if none came free within `wait` seconds; "" while
        MAILSERVICE_MX_CONNECTIONS is 0 (no cap). A spaced destination takes one connection at a time: a
        second one is what receivers that count connections per client refuse first."""
        cap = self.cap(destination)
        return take_slot(destination, cap, wait=wait) if cap else ""

    def cap(self, destination: str) -> int:
        return 1 if destination in self.spaced else settings.MAILSERVICE_MX_CONNECTIONS

    def give_back(self, destination: str, token: str) -> None:
        if token:
            give_back_slot(destination, token)

    def at_cap(self, destination: str) -> NotSent:
        why = f"destination {destination} at its connection cap ({self.cap(destination)})"
        return NotSent(why, until=_after(THROTTLE_RETRY_SECONDS))

    def observe(self, destination: str, result: SendResult) -> SendResult:
        """The receivers' answers: a slow-down reply lowers the destination's rate, spaces it and, when
        nobody got the message, puts its recipients back until the spacing ends; a delivery eases a
        spacing; any error is remembered for the console."""
        replies = [result.final, *result.refused.values()]
        failed = [reply for reply in replies if reply.code >= 400]
        if failed:
            _remember(destination, last_error=str(failed[-1])[:_ERROR_CHARS], last_error_at=time.time())
        throttle = next((reply for reply in failed if is_throttle(reply)), None)
        if throttle is None:
            if result.delivered and destination in self.spaced:
                spacing.succeeded(destination)
            return result
        slow_down(destination, reply=str(throttle))
        interval = spacing.refused(destination, reason=str(throttle))
        self.spaced.add(destination)
        if result.delivered:
            return result
        why = f"{destination} asked to slow down: {throttle}"
        result.not_sent = NotSent(why, until=_after(interval), throttle=True)
        return result


def _stored(destination: str) -> dict:
    if settings.REDIS_URL:
        return {}  # rate_status reads the hash itself
    with _local_lock:
        details = _local.get(destination, _Details())
    return {
        "mx_hosts": details.mx_hosts,
        "tls_policy": details.tls_policy,
        "last_error": details.last_error,
        "last_error_at": str(details.last_error_at) if details.last_error_at else "",
    }


def _destination_names() -> list[str]:
    if settings.REDIS_URL:
        try:
            client = shared_redis()
            client.zremrangebyscore(INDEX_KEY, "-inf", time.time() - INDEX_DAYS * 86400)
            names: list[bytes] = client.zrange(INDEX_KEY, 0, -1)  # type: ignore[assignment]  # sync client
            return sorted(as_text(name) for name in names)
        except RedisError as exc:
            logger.warning("destinations: list unavailable: %s", exc)
            return []
    with _local_lock:
        return sorted(set(_local) | set(local_destinations()))


def destination_status(destination: str) -> dict:
    """One destination as the console shows it: fleet_limits.rate_status's fields, `mx_hosts` (list), `tls_policy`,
    `last_error` and `last_error_at` (datetime or None)."""
    status = rate_status(destination, cap=settings.MAILSERVICE_MX_CONNECTIONS)
    details = status.pop("details") or _stored(destination)
    error_at = float(details.get("last_error_at") or 0)
    status.update(
        name=destination,
        mx_hosts=details.get("mx_hosts", "").split(),
        tls_policy=details.get("tls_policy", ""),
        last_error=details.get("last_error", ""),
        last_error_at=datetime.fromtimestamp(error_at, UTC) if error_at else None,
    )
    return status


def destination_list() -> list[dict]:
    """Every destination used within INDEX_DAYS, by name (`destination_status` each)."""
    return [destination_status(name) for name in _destination_names()]

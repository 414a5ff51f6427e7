"""Direct delivery's SMTP sessions, and the idle ones each process keeps open between batches.

A batch (messaging/outbound/direct/transport.py) opens a session per MX address it needs and reuses it, after RSET,
for the batch's other transactions to that address. When the batch ends, each session that may carry
another transaction goes to the process's IdleSessions instead of being closed, for the next batch of
any of the process's threads: a batch of 50 messages to 50 domains otherwise paid for 50 connections,
banners, EHLOs and STARTTLS handshakes (docs/benchmarks.md, isolation). A batch looks for a kept
session to any of the domain's MX hosts before it opens one (transport.py `_session`).

What makes a session reusable for a transaction (its key, and `MxSession.meets`):
- the MX address and port, and the source address and EHLO name it was opened from;
- the TLS it was opened under: one opened without a mandatory policy (opportunistic STARTTLS, unverified,
  or in clear) serves only transactions whose policy is not mandatory, so a domain that has since
  published MTA-STS enforce or DANE gets a new, verified session; one verified under a mandatory policy
  serves only its own host under the same kind of policy, and under DANE the same TLSA records.

Bounds: a session idle for MAILSERVICE_MX_SESSION_IDLE_SECONDS is closed (QUIT) by the pool's reaper
thread; one that has carried MAILSERVICE_MX_SESSION_MESSAGES transactions, or is older than its
connection slot's lifetime allows (`max_age`), is not reused; a process keeps at most
MAILSERVICE_MX_IDLE_SESSIONS idle, closing any beyond. A kept session is RSET before its next
transaction: one the receiver has dropped meanwhile fails the RSET, is closed, and the batch connects
anew; no message has been begun on it, so it costs a reconnect, never a failure or an attempt.

An idle session keeps its destination's connection slot (messaging/outbound/direct/destinations.py) until it
closes: the receiver counts the connection while it is open, whatever this side does with it, so a
slot given back on idle would let the fleet hold more connections than MAILSERVICE_MX_CONNECTIONS. The
cost, other workers finding the destination at its cap, is bounded by the short idle time; within the
process, a batch that finds the destination at its cap closes one of its idle sessions and takes its
slot (transport.py `_slot`).
"""

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from messaging.outbound.direct import tls_policy
from messaging.outbound.envelope import Source
from messaging.outbound.fleet_limits import give_back_slot
from messaging.outbound.smtp_client import SmtpConnection

# An idle session is closed without waiting longer for its QUIT's reply: nothing depends on the reply,
# and a slow receiver's (a tarpit's) would hold the reaper and, meanwhile, the other sessions' slots.
QUIT_WAIT = 1.0

# A session is one to (source address and EHLO name, or None: the system's; MX address; port).
SessionKey = tuple[Source | None, str, int]


def max_age() -> float:
    """Seconds a session may be reused after it opened: a transaction begun on it ends (within two SMTP
    timeouts) before the connection slot taken when it opened expires in Redis (the lease's lifetime)."""
    return settings.MAILSERVICE_DISPATCH_LEASE_SECONDS - 2 * settings.MAILSERVICE_SMTP_TIMEOUT


@dataclass
class MxSession:
    host: str
    address: str
    port: int
    smtp: SmtpConnection
    source: Source | None
    destination: str = ""
    slot: str | None = None  # its destination's connection slot, given back when it closes
    secured: str = tls_policy.NONE  # the mandatory policy its TLS was checked against (for host), if any
    tlsa: tuple[tls_policy.Tlsa, ...] = ()  # under DANE: the records its certificate matched
    opened_at: float = field(default_factory=time.monotonic)
    transactions: int = 0
    idle_since: float = 0.0
    # Its TLS as the report of another policy domain it carries mail for counts it.
    tls_outcome: tls_policy.Outcome = field(default_factory=tls_policy.Outcome)
    reported: set[str] = field(default_factory=set)  # the policy domains whose TLS report counts it

    def report_for(self, policy: tls_policy.HostPolicy) -> None:
        """Count the session in the TLS report of `policy`'s domain, once (RFC 8460: a kept session carrying
        a domain's mail is a session with that domain's MX, whichever domain it was opened for)."""
        if policy.domain not in self.reported:
            self.reported.add(policy.domain)
            tls_policy.record(policy, host=self.host, address=self.address, outcome=self.tls_outcome)

    @property
    def key(self) -> SessionKey:
        return (self.source, self.address, self.port)

    def meets(self, host: str, policy: tls_policy.HostPolicy) -> bool:
        """Whether this session may carry a transaction that `policy` governs."""
        if not policy.mandatory:
            return True
        same_records = policy.kind != tls_policy.DANE or self.tlsa == policy.tlsa
        return self.host == host and self.secured == policy.kind and same_records

    def reusable(self) -> bool:
        """Open (no 421 or failure closed it), within its transaction count and its age."""
        return (
            self.smtp.smtp.sock is not None
            and self.transactions < settings.MAILSERVICE_MX_SESSION_MESSAGES
            and time.monotonic() - self.opened_at < max_age()
        )

    def close(self, *, quit_wait: float | None = None) -> None:
        """QUIT (its reply awaited at most `quit_wait` seconds, else the SMTP timeout), and give back its
        destination's connection slot."""
        if quit_wait is not None:
            self.smtp.smtp.timeout = min(self.smtp.smtp.timeout, quit_wait)
        self.smtp.close()
        if self.slot:
            give_back_slot(self.destination, self.slot)
        self.slot = None

    def __str__(self) -> str:
        return f"{self.host} [{self.address}]"


class IdleSessions:
    """The process's idle MX sessions, by key, most recently used last; a daemon thread closes each one
    MAILSERVICE_MX_SESSION_IDLE_SECONDS after it was put back (settings are read at each use)."""

    def __init__(self) -> None:
        self._idle: dict[SessionKey, list[MxSession]] = {}
        self._count = 0
        self._changed = threading.Condition()
        self._reaper: threading.Thread | None = None

    def __len__(self) -> int:
        return self._count

    def put(self, session: MxSession) -> None:
        """Keep `session` open for a later batch; close it if it may not carry another transaction, the pool
        is off (an idle time of 0) or the process already keeps MAILSERVICE_MX_IDLE_SESSIONS."""
        if settings.MAILSERVICE_MX_SESSION_IDLE_SECONDS > 0 and session.reusable():
            with self._changed:
                if self._count < settings.MAILSERVICE_MX_IDLE_SESSIONS:
                    session.idle_since = time.monotonic()
                    self._idle.setdefault(session.key, []).append(session)
                    self._count += 1
                    self._start_reaper()
                    self._changed.notify()
                    return
        session.close(quit_wait=QUIT_WAIT)

    def take(self, key: SessionKey, fits: Callable[[MxSession], bool]) -> MxSession | None:
        """The most recently used idle session of `key` that `fits` and has not expired, out of the pool."""
        deadline = time.monotonic() - settings.MAILSERVICE_MX_SESSION_IDLE_SECONDS
        with self._changed:
            kept = self._idle.get(key, [])
            for index in range(len(kept) - 1, -1, -1):
                if kept[index].idle_since > deadline and fits(kept[index]):
                    return self._remove(key, index)
        return None

    def holds(self, host: str, source: Source | None) -> bool:
        """Whether an idle session to `host` from `source` is kept (expired or not, fitting or not)."""
        with self._changed:
            return any(s.host == host and s.source == source for kept in self._idle.values() for s in kept)

    def take_for(self, destination: str) -> MxSession | None:
        """The least recently used idle session to `destination`, out of the pool: the caller closes it
        and takes its connection slot."""
        with self._changed:
            found = [
                (session.idle_since, key, index)
                for key, kept in self._idle.items()
                for index, session in enumerate(kept)
                if session.destination == destination
            ]
            if not found:
                return None
            _, key, index = min(found)
            return self._remove(key, index)

    def close_all(self) -> None:
        """Close every idle session (worker shutdown)."""
        with self._changed:
            closing = [session for kept in self._idle.values() for session in kept]
            self._idle.clear()
            self._count = 0
        for session in closing:
            session.close(quit_wait=QUIT_WAIT)

    def _remove(self, key: SessionKey, index: int) -> MxSession:
        kept = self._idle[key]
        session = kept.pop(index)
        if not kept:
            del self._idle[key]
        self._count -= 1
        return session

    def _start_reaper(self) -> None:
        if self._reaper is None or not self._reaper.is_alive():  # none yet, or this is a forked child
            self._reaper = threading.Thread(target=self._reap, name="mx-idle-sessions", daemon=True)
            self._reaper.start()

    def _reap(self) -> None:
        while True:
            with self._changed:
                expired, wait = self._expired()
                if not expired:
                    self._changed.wait(wait)
                    continue
            for session in expired:  # QUIT outside the lock
                session.close(quit_wait=QUIT_WAIT)

    def _expired(self) -> tuple[list[MxSession], float | None]:
        """The sessions idle past their time, out of the pool; else how long until the next one is."""
        idle_seconds = settings.MAILSERVICE_MX_SESSION_IDLE_SECONDS
        now = time.monotonic()
        expired = [
            (key, index)
            for key, kept in self._idle.items()
            for index, session in enumerate(kept)
            if now - session.idle_since >= idle_seconds
        ]
        sessions = [self._remove(key, index) for key, index in sorted(expired, key=lambda found: -found[1])]
        if sessions or not self._idle:
            return sessions, None
        first = min(session.idle_since for kept in self._idle.values() for session in kept)
        return [], max(0.0, first + idle_seconds - now)


idle_sessions = IdleSessions()  # one per process, shared by its threads

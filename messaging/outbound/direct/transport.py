"""Direct delivery (EMAIL_URL=mx://): each recipient domain's own mail servers, found in DNS.

The hosts of each recipient domain come from its MX records (messaging/outbound/direct/routing.py): a
domain that cannot take mail fails its recipients at once, a lookup that fails or hosts that all fail
give a temporary reply, so dispatch defers the message with its backoff. A host that refuses the
connection or greets with anything but 220 passes the turn to the next. The TLS of each session is what the
receiver demands (messaging/outbound/direct/tls_policy.py): DANE, else the domain's MTA-STS policy
(messaging/outbound/direct/mta_sts.py), else STARTTLS when offered without checking the certificate
(opportunistic, RFC 7435), in clear only when it is not offered or the upgrade fails. A host a policy
excludes, or whose session cannot meet it, passes the turn too; with none left the recipients are
deferred (450 4.7.5), never sent in clear or to an unlisted host.

With MAILSERVICE_SOURCE_ADDRESSES each transaction leaves from an address of its sending domain's pool,
chosen within the warm-up caps (messaging/outbound/direct/sources.py), and its session binds to that address
and gives its EHLO name; when no address of the pool has room the message is not sent (`NotSent`).

No destination's failure raises: every outcome is a `SendResult`, with a synthesized reply where no
server answered, so one dead destination never ends the batch for the others. Bounded whatever DNS
says: at most MAX_CONNECTION_ATTEMPTS new connections per recipient domain and transaction, none begun
after SEARCH_BUDGET_TIMEOUTS SMTP timeouts, each SMTP step within MAILSERVICE_SMTP_TIMEOUT. An MX that
is an IP literal or `localhost` is never used; one that resolves to loopback, private or link-local
addresses only with MAILSERVICE_MX_ALLOW_PRIVATE.

Each recipient domain's transaction goes through its destination's limits (messaging/outbound/direct/destinations.py):
the rate, a connection slot for each session opened, the slow-down replies, and its spacing after a refusal
(messaging/outbound/direct/spacing.py); a limit that stops it returns a result with `not_sent`, which dispatch
puts back without using an attempt.

Sessions outlive their batch: each worker process keeps them idle for its next batches, under their
connection slots (messaging/outbound/direct/sessions.py).
"""

import functools
import ipaddress
import smtplib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import dns.exception
import dns.name
import dns.resolver
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from domains.dns import dns_resolver
from domains.models import SourceAddress
from mailservice.addresses import may_connect
from mailservice.errors import ValidationFailed
from messaging.outbound.direct import spacing, tls_policy
from messaging.outbound.direct.destinations import CONNECTION_WAIT, DestinationGate, destination_of
from messaging.outbound.direct.mta_sts import policy_for, verified_tls_context
from messaging.outbound.direct.routing import (
    Undeliverable,
    a_label,
    error_brief,
    is_ip_literal,
    mx_hosts,
)
from messaging.outbound.direct.sessions import QUIT_WAIT, MxSession, SessionKey, idle_sessions
from messaging.outbound.direct.sources import PoolFull, choose_source, source_address_rows, source_of, source_past_cap
from messaging.outbound.envelope import Connection, Envelope, NotSent, Pool, Reply, SendResult, Source, merged_results
from messaging.outbound.provider_rules import is_throttle
from messaging.outbound.smtp_client import RelayConfig, SmtpConnection, reply_of

# New connections per recipient domain and transaction, over all its hosts (Postfix's smtp_mx_address_limit).
MAX_CONNECTION_ATTEMPTS = 5
# No new host is tried once this many SMTP timeouts have passed looking for one: hosts that accept
# connections and never greet would otherwise hold the message (and its lease) for 5 timeouts.
SEARCH_BUDGET_TIMEOUTS = 2


def validate_mx_url(url: str) -> None:
    """EMAIL_URL=mx:// takes nothing after the scheme; its resolver and CA file must be usable, or start-up stops."""
    parts = urlsplit(url)
    given = {"a host": parts.netloc, "a path": parts.path.strip("/"), "options": parts.query}
    given["a fragment"] = parts.fragment
    extra = [what for what, value in given.items() if value]
    if extra:
        # Only what was found is named: a URL may carry a password.
        raise ImproperlyConfigured(
            f"EMAIL_URL: mx:// takes nothing after the scheme (found {' and '.join(extra)}); see MAILSERVICE_MX_*"
        )
    try:
        dns_resolver()
    except ValidationFailed as exc:
        raise ImproperlyConfigured(str(exc)) from None
    verified_tls_context(settings.MAILSERVICE_TLS_CA_FILE)  # an unreadable CA file stops start-up, not a send


class _AtConnectionCap(Exception):
    """The destination's connections are all in use (MAILSERVICE_MX_CONNECTIONS) and none came free."""


class _Spaced(Exception):
    """The destination refused lately and its one new connection per spacing is taken: `wait` seconds until the next."""

    def __init__(self, destination: str, wait: float) -> None:
        super().__init__(destination)
        self.wait = wait


class _HostSkipped(Exception):
    """One MX host cannot be used; `transient`: it may be usable later (a lookup failed)."""

    def __init__(self, detail: str, *, transient: bool) -> None:
        super().__init__(detail)
        self.transient = transient


@dataclass(frozen=True)
class _Target:
    """One MX address to open a session with, and what the session must meet."""

    host: str
    address: str
    policy: tls_policy.HostPolicy
    source: Source | None
    destination: str


@dataclass
class _Search:
    """The search for a session among a domain's MX hosts: what failed, and so what to answer if none answers."""

    deadline: float  # time.monotonic() past which no new host is tried
    errors: list[str] = field(default_factory=list)
    refused_by_policy: str = ""
    transient: bool = False
    throttled: Reply | None = None  # a host's slow-down greeting (421), should none answer
    refusal: str = ""  # a host refused or reset the connection, or greeted with 4xx: the destination is spaced
    attempts: int = 0
    claimed: bool = False  # this search's one new connection under the destination's spacing is claimed

    def out_of_time(self) -> bool:
        return time.monotonic() >= self.deadline

    def undeliverable(self, domain: str) -> "Undeliverable":
        if self.refused_by_policy:
            # 450, not 451: a 451 4.7.x reply reads as "slow down" (fleet_limits.is_slow_down), and a
            # receiver's TLS policy says nothing about the pace.
            return Undeliverable(Reply(450, f"4.7.5 {self.refused_by_policy}"))
        if self.throttled is not None:
            return Undeliverable(self.throttled)
        last = self.errors[-1] if self.errors else "no host to try"
        if self.transient:
            return Undeliverable(
                Reply(451, f"4.4.1 no mail host of {domain} could be used ({self.attempts} tried): {last}")
            )
        return Undeliverable(Reply(550, f"5.4.4 no mail host of {domain} may be used: {last}", local=True))


class MxConnection:
    """The batch's SMTP sessions, one per MX address, opened as recipients' domains need them (or taken
    from those the process kept idle: messaging/outbound/direct/sessions.py) and kept open for the batch: a
    transaction to a destination already reached reuses its session after RSET. When the batch ends
    they go back to the process's idle sessions."""

    def __init__(self, *, resolver: dns.resolver.Resolver, port: int, timeout: float, allow_private: bool) -> None:
        self.resolver, self.port, self.timeout, self.allow_private = resolver, port, timeout, allow_private
        self._sessions: dict[SessionKey, MxSession] = {}
        self._routes: dict[str, tuple[str, list[str]] | Undeliverable] = {}  # by domain: (destination, hosts)
        self._pools: dict[Pool, list[SourceAddress]] = {}  # their warm-up rows, read once a batch
        self._sts: dict[str, tls_policy.HostPolicy] = {}  # by domain, for the batch
        self.gate = DestinationGate()

    def send(self, *, envelope: Envelope, data: bytes, name: str) -> SendResult:
        """One transaction per recipient domain (each to its own servers), merged into one result."""
        by_domain: dict[str, list[str]] = {}
        for recipient in envelope.recipients:
            by_domain.setdefault(recipient.rpartition("@")[2].lower(), []).append(recipient)
        try:
            sources = self._sources(envelope, list(by_domain))
        except PoolFull as exc:
            return exc.result
        results: list[tuple[list[str], SendResult]] = []
        for domain, recipients in by_domain.items():
            # Once a part of the message was begun, the others follow: they wait for their destination's limits.
            follows = envelope.follows or bool(results)
            result = self._send_to(
                domain, replace(envelope, recipients=recipients, follows=follows), data, name, sources
            )
            if result.not_sent is not None and not follows:
                return result  # held back before anything was begun: the whole message waits
            results.append((recipients, result))
        return merged_results(results)

    def _sources(self, envelope: Envelope, domains: list[str]) -> dict[str, Source]:
        """The source address each domain's transaction leaves from, counted against the warm-up caps ({}
        without a pool: the system chooses). PoolFull if none has room for any of them; once one part
        of the message goes, the others go too, past the caps if need be (`choose_source`'s past_cap)."""
        pool = envelope.pool
        if pool is None:
            return {}
        if pool not in self._pools:
            self._pools[pool] = list(pool.rows) if pool.rows else source_address_rows(pool.addresses)
        rows = self._pools[pool]
        if not rows:
            raise PoolFull(f"the pool {pool.name} has no address in MAILSERVICE_SOURCE_ADDRESSES")
        chosen = {
            domain: choose_source(rows, self._destination(domain), past_cap=envelope.follows) for domain in domains
        }
        if all(row is None for row in chosen.values()):
            raise PoolFull(f"every address of pool {pool.name} is at its warm-up cap for {', '.join(domains)}")
        return {domain: source_of(row or source_past_cap(rows, domain)) for domain, row in chosen.items()}

    def _send_to(
        self, domain: str, envelope: Envelope, data: bytes, name: str, sources: dict[str, Source]
    ) -> SendResult:
        try:
            destination, hosts = self._route(domain)
        except Undeliverable as exc:
            return SendResult(final=exc.reply)
        if self.gate.note_due(destination, hosts):
            policy = tls_policy.destination_tls_policy(domain=a_label(domain))
            self.gate.note(destination, hosts, tls_policy=f"{policy} ({domain})")
        if (refusal := self.gate.admit(destination, follows=envelope.follows)) is not None:
            return _not_sent(refusal)
        try:
            session = self._session(domain, sources.get(domain), follows=envelope.follows)
        except _AtConnectionCap:
            return _not_sent(self.gate.at_cap(destination))
        except _Spaced as exc:
            why = f"{destination} refused a connection lately: its next new connection in {exc.wait:.1f} s"
            return _not_sent(NotSent(why, until=datetime.now(UTC) + timedelta(seconds=exc.wait)))
        except Undeliverable as exc:
            return self.gate.observe(destination, SendResult(final=exc.reply))
        session.transactions += 1
        try:
            result = replace(session.smtp.send(envelope=envelope, data=data, name=name), remote_host=session.host)
        except (OSError, smtplib.SMTPException) as exc:
            # Not handed to the next host: the data may have arrived before the connection failed.
            self._drop(session)
            if isinstance(exc, ConnectionResetError | smtplib.SMTPServerDisconnected):
                spacing.refused(destination, reason=f"{session} dropped the session: {error_brief(exc)}")
            result = SendResult(final=Reply(451, f"4.4.2 the session with {session} failed: {error_brief(exc)}"))
        return self.gate.observe(destination, result)

    def _destination(self, domain: str) -> str:
        """The destination whose warm-up caps a domain's mail counts against (the domain, should its route fail)."""
        try:
            return self._route(domain)[0]
        except Undeliverable:
            return domain

    def _route(self, domain: str) -> tuple[str, list[str]]:
        """(destination, hosts) of a recipient domain, looked up once per batch."""
        if domain not in self._routes:
            try:
                name = a_label(domain)
                hosts = mx_hosts(self.resolver, name)
                self._routes[domain] = (destination_of(name, hosts), hosts)
            except Undeliverable as exc:
                self._routes[domain] = exc
        route = self._routes[domain]
        if isinstance(route, Undeliverable):
            raise route
        return route

    def _sts_policy(self, domain: str) -> tls_policy.HostPolicy:
        if domain not in self._sts:
            lookup = policy_for(self.resolver, a_label(domain), allowed=self._may_connect)
            self._sts[domain] = tls_policy.sts_policy(domain, lookup)
        return self._sts[domain]

    def _may_connect(self, address: str) -> bool:
        return may_connect(address, allow_private=self.allow_private)

    def _slot(self, destination: str, *, follows: bool) -> str:
        """A connection slot of the destination. At its cap: the slot of a session to it the process keeps
        idle (closed), else one that comes free in time, else the one of this batch's idle session to it
        (closed), else _AtConnectionCap. A transaction that `follows` one already begun waits longer."""
        token = self.gate.take_slot(destination, wait=0)
        if token is None and (pooled := idle_sessions.take_for(destination)) is not None:
            token, pooled.slot = pooled.slot or "", None
            pooled.close(quit_wait=QUIT_WAIT)
        if token is None:
            token = self.gate.take_slot(destination, wait=self.timeout if follows else CONNECTION_WAIT)
        if token is not None:
            return token
        idle = next((kept for kept in self._sessions.values() if kept.destination == destination), None)
        if idle is None or idle.slot is None:
            raise _AtConnectionCap(destination)
        token, idle.slot = idle.slot, None
        self._drop(idle)
        return token

    def _session(self, domain: str, source: Source | None, *, follows: bool) -> MxSession:
        """A session with the first host of the domain's route that answers as its TLS policy demands;
        Undeliverable naming the last error (4.7.5 when a policy refused a host)."""
        destination, hosts = self._route(domain)
        search = _Search(deadline=time.monotonic() + SEARCH_BUDGET_TIMEOUTS * self.timeout)
        sts = self._sts_policy(domain)
        prepared: dict[str, tuple[list[str], tls_policy.HostPolicy] | tls_policy.TlsRefused | _HostSkipped] = {}

        def prepare(host: str) -> tuple[list[str], tls_policy.HostPolicy] | tls_policy.TlsRefused | _HostSkipped:
            """The host's addresses and policy, looked up (and any refusal recorded) once per session search."""
            if host not in prepared:
                try:
                    prepared[host] = (self._addresses_from(host, source), self._host_policy(domain, host, sts))
                except (tls_policy.TlsRefused, _HostSkipped) as exc:
                    prepared[host] = exc
            return prepared[host]

        # First a session kept open to any of the domain's hosts, as Postfix's connection cache reuses one
        # per destination: hosts of equal preference come in a new order each batch, and a session opened
        # to the one listed first, beside a kept one to another, took a second connection slot (at the
        # destination's cap, by closing the kept one).
        for host in hosts:
            if self._holds(host, source) and isinstance(found := prepare(host), tuple):
                addresses, policy = found
                for address in addresses:
                    if (kept := self._kept((source, address, self.port), host, policy)) is not None:
                        return kept
        for host in hosts:
            if search.out_of_time():
                search.errors.append(f"no further host tried after {SEARCH_BUDGET_TIMEOUTS * self.timeout:g} s")
                break
            found = prepare(host)
            if isinstance(found, tls_policy.TlsRefused):
                search.refused_by_policy = str(found)
                continue
            if isinstance(found, _HostSkipped):
                search.errors.append(str(found))
                search.transient = search.transient or found.transient
                continue
            addresses, policy = found
            for address in addresses:
                if (kept := self._kept((source, address, self.port), host, policy)) is not None:
                    return kept
                if search.attempts == MAX_CONNECTION_ATTEMPTS or search.out_of_time():
                    break
                session = self._open(search, _Target(host, address, policy, source, destination), follows=follows)
                if session is not None:
                    return session
        if search.refusal:
            spacing.refused(destination, reason=search.refusal)
        raise search.undeliverable(domain)

    def _holds(self, host: str, source: Source | None) -> bool:
        """Whether this batch or the process keeps a session to `host` from `source` (usable or not)."""
        mine = any(session.host == host and session.source == source for session in self._sessions.values())
        return mine or idle_sessions.holds(host, source)

    def _kept(self, key: SessionKey, host: str, policy: tls_policy.HostPolicy) -> MxSession | None:
        """A session already open to the address that may carry this transaction, this batch's or else one
        the process kept idle, after a successful RSET. One the receiver has dropped fails the RSET and is
        closed: the caller connects anew, and nothing of the message was begun on it."""
        kept = self._sessions.get(key)
        if kept is not None and kept.meets(host, policy):
            if kept.reusable() and kept.smtp.reset():
                kept.report_for(policy)
                return kept
            self._drop(kept)
        pooled = idle_sessions.take(key, lambda session: session.meets(host, policy))
        if pooled is None:
            return None
        if not pooled.smtp.reset():
            pooled.close(quit_wait=QUIT_WAIT)
            return None
        if (replaced := self._sessions.pop(key, None)) is not None:  # opened under a policy this one does not meet
            idle_sessions.put(replaced)
        self._sessions[key] = pooled
        pooled.report_for(policy)
        return pooled

    def _open(self, search: "_Search", target: "_Target", *, follows: bool) -> MxSession | None:
        """A new session with one MX address, under a slot of its destination; None (noted in `search`) if it fails.
        A destination spaced after a refusal allows one new connection per spacing (the search's first: _Spaced
        if another took it), except for a transaction that `follows` one already begun."""
        if not follows and not search.claimed:
            if (wait := spacing.claim_connection(target.destination)) > 0:
                raise _Spaced(target.destination, wait)
            search.claimed = True
        slot = self._slot(target.destination, follows=follows)
        search.attempts += 1
        search.transient = True
        try:
            smtp, outcome = self._connect(target.host, target.address, target.policy, target.source)
        except tls_policy.TlsRefused as exc:
            self.gate.give_back(target.destination, slot)
            search.refused_by_policy = str(exc)
            return None
        except (OSError, smtplib.SMTPException) as exc:  # refused, timed out, or greeted with other than 220
            self.gate.give_back(target.destination, slot)
            search.errors.append(f"{target.host} [{target.address}]: {error_brief(exc)}")
            reply = reply_of(exc)
            if reply is not None and is_throttle(reply):
                search.throttled = reply
            if _is_refusal(exc, reply):
                search.refusal = search.errors[-1]
            return None
        session = MxSession(
            target.host,
            target.address,
            self.port,
            smtp,
            target.source,
            destination=target.destination,
            slot=slot,
            tls_outcome=outcome,
            reported={target.policy.domain},
        )
        if target.policy.mandatory:
            session.secured, session.tlsa = target.policy.kind, target.policy.tlsa
        self._drop(self._sessions.get(session.key))
        self._sessions[session.key] = session
        return session

    def _host_policy(self, domain: str, host: str, sts: tls_policy.HostPolicy) -> tls_policy.HostPolicy:
        """DANE for the host, else the domain's MTA-STS policy; TlsRefused when that policy excludes the host."""
        policy = tls_policy.host_policy(domain, host, self.port, sts)
        if policy.kind == tls_policy.STS_ENFORCE and policy.sts is not None and not policy.sts.allows(host):
            outcome = tls_policy.Outcome(tls_policy.VALIDATION_FAILURE, f"{host} is not listed in its mx patterns")
            tls_policy.record(policy, host=host, address="", outcome=outcome)
            raise tls_policy.TlsRefused(f"{policy.describe()}: {outcome.detail}")
        return policy

    def _connect(
        self, host: str, address: str, policy: tls_policy.HostPolicy, source: Source | None
    ) -> tuple[SmtpConnection, tls_policy.Outcome]:
        """A session with the TLS `policy` demands, and its TLS outcome as another domain without a mandatory
        policy would report it; TlsRefused when a mandatory policy's demand is not met."""
        clear = RelayConfig(address, self.port, "", "", "none", verify=False)
        connection = SmtpConnection(clear, self.timeout, source)
        outcome = tls_policy.upgrade(connection.smtp, host=host, policy=policy)
        tls_policy.record(policy, host=host, address=address, outcome=outcome)
        if not outcome.failure or (outcome.in_clear and not policy.mandatory):
            return connection, outcome
        connection.close()
        if policy.mandatory:
            raise tls_policy.TlsRefused(f"{policy.describe()}: {outcome.detail} [{address}]")
        if outcome.retry_unverified:  # MTA-STS testing: the failure is reported, the mail goes as without policy
            unverified = SmtpConnection(replace(clear, security="starttls-optional"), self.timeout, source)
            return unverified, tls_policy.Outcome()
        # The offered upgrade failed (a handshake error, a refusal, a reset): opportunistic TLS then
        # delivers in clear over a new connection rather than not at all, as Postfix's "may" level does.
        return SmtpConnection(clear, self.timeout, source), outcome

    def _addresses_from(self, host: str, source: Source | None) -> list[str]:
        """The host's usable addresses of the source address's family (IPv4 or IPv6)."""
        addresses = self._addresses(host)
        if source is None:
            return addresses
        version = ipaddress.ip_address(source.address).version
        fitting = [address for address in addresses if ipaddress.ip_address(address).version == version]
        if not fitting:
            raise _HostSkipped(f"{host} has no IPv{version} address to reach from {source.address}", transient=True)
        return fitting

    def _addresses(self, host: str) -> list[str]:
        """The addresses of an MX host that may be connected to, IPv4 first."""
        if is_ip_literal(host):
            raise _HostSkipped(f"the MX {host} is an IP address, not a host name (RFC 5321 5.1)", transient=False)
        if host == "localhost" or host.endswith(".localhost"):
            raise _HostSkipped(f"the MX {host} is a loopback name", transient=False)
        found: list[str] = []
        failure = ""
        for rdtype in ("A", "AAAA"):
            try:
                found += [record.address for record in self.resolver.resolve(host, rdtype, search=False)]
            except (dns.resolver.NXDOMAIN, dns.resolver.NoAnswer):
                continue
            except dns.exception.DNSException as exc:
                failure = f"the {rdtype} lookup of {host} failed: {error_brief(exc)}"
        usable = [a for a in found if may_connect(a, allow_private=self.allow_private)]
        if usable:
            return usable
        if failure:
            raise _HostSkipped(failure, transient=True)
        if found:
            refused = ", ".join(found[:3])
            raise _HostSkipped(
                f"{host} resolves only to loopback, private or link-local addresses ({refused}); "
                "MAILSERVICE_MX_ALLOW_PRIVATE is off",
                transient=False,
            )
        raise _HostSkipped(f"{host} has no A or AAAA record", transient=False)

    def _drop(self, session: MxSession | None) -> None:
        if session is None:
            return
        self._sessions.pop(session.key, None)
        session.close()

    def close(self, *, keep: bool) -> None:
        """End the batch: its sessions go to the process's idle sessions (`keep`), or are closed."""
        sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            if keep:
                idle_sessions.put(session)
            else:
                session.close()


def _is_refusal(exc: BaseException, reply: Reply | None) -> bool:
    """A receiver turning a connection away (refused, reset, closed before its banner, a 4xx banner,
    "too many connections"), as against one that cannot be reached at all (a timeout, no route)."""
    if isinstance(exc, ConnectionRefusedError | ConnectionResetError | smtplib.SMTPServerDisconnected):
        return True
    return reply is not None and (400 <= reply.code < 500 or "too many connections" in reply.text.lower())


def _not_sent(refusal: NotSent) -> SendResult:
    return SendResult(final=Reply(451, f"4.4.5 not sent: {refusal.why}"), not_sent=refusal)


# Routing answers (MX, A/AAAA, the MTA-STS TXT) kept for their TTL across batches, as an MTA's resolver
# keeps them: without, every batch asked again for each of its domains (3 queries a destination).
# DANE's lookups have a cache of their own (tls_policy), which keeps each answer's AD bit.
ANSWER_CACHE_SIZE = 10_000


@functools.cache
def _answer_cache(resolver_address: tuple[object, ...]) -> dns.resolver.LRUCache:
    """One cache per resolver configured (the tests start a DNS server per test)."""
    return dns.resolver.LRUCache(ANSWER_CACHE_SIZE)


class MxTransport:
    """Direct delivery; its settings are read at each batch (tests change them while a process runs)."""

    host = ""  # no one server: each result names the MX host that answered (SendResult.remote_host)

    def close(self) -> None:
        """Close the sessions the process keeps idle (worker shutdown)."""
        idle_sessions.close_all()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        resolver = dns_resolver()
        resolver.cache = _answer_cache((*resolver.nameservers, resolver.port))
        connection = MxConnection(
            resolver=resolver,
            port=settings.MAILSERVICE_MX_PORT,
            timeout=settings.MAILSERVICE_SMTP_TIMEOUT,
            allow_private=settings.MAILSERVICE_MX_ALLOW_PRIVATE,
        )
        try:
            yield connection
        except BaseException:  # as the relay's pool: only a batch that raised nothing gives its sessions back
            connection.close(keep=False)
            raise
        connection.close(keep=True)

"""A private, throwaway Postfix (Debian's `postfix` package) as a real SMTP peer: an MX of a test domain,
or a relay that throttles with anvil as a production Postfix does.

Its configuration, queue and data directories live in a temporary directory; its smtpd listens on a
127.0.0.x address and an unprivileged port; everything it accepts goes on to `next_hop` (an aiosmtpd
sink of the test, tests/harness/smtp.py), so the test reads what arrived, with the Received header
Postfix added. `postfix start-fg` keeps the master in the foreground, so it is a ChildProcess
whose log (maillog_file = /dev/stdout) is Postfix's log, shown in a failed test's report.
"""

import os
import shutil
import signal
import smtplib
import tempfile
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path

from tests.harness.process import ChildProcess

POSTFIX = shutil.which("postfix", path=f"{os.environ.get('PATH', '')}:/usr/sbin")

# What a `master.cf` needs beyond the smtpd listener: the queue manager and the daemons it calls on
# (cleanup, rewriting, bounces), anvil for the client limits, the smtp client for the next hop, and
# postlogd for maillog_file. None chrooted: the queue is in a temporary directory.
MASTER_SERVICES = """\
pickup    unix       n - n 60    1 pickup
cleanup   unix       n - n -     0 cleanup
qmgr      unix       n - n 300   1 qmgr
tlsmgr    unix       - - n 1000? 1 tlsmgr
rewrite   unix       - - n -     - trivial-rewrite
bounce    unix       - - n -     0 bounce
defer     unix       - - n -     0 bounce
trace     unix       - - n -     0 bounce
verify    unix       - - n -     1 verify
flush     unix       n - n 1000? 0 flush
proxymap  unix       - - n -     - proxymap
smtp      unix       - - n -     - smtp
relay     unix       - - n -     - smtp
error     unix       - - n -     - error
retry     unix       - - n -     - error
discard   unix       - - n -     - discard
anvil     unix       - - n -     1 anvil
scache    unix       - - n -     1 scache
postlog   unix-dgram n - n -     1 postlogd
"""


@dataclass(frozen=True)
class ClientLimits:
    """anvil's limits per client address (postconf(5)); 0 is Postfix's "no limit".

    Over `messages` MAIL FROMs per `time_unit` seconds Postfix answers "450 4.7.1 Error: too much mail
    from …"; over `connections` at once it greets with "421 4.7.0 … Error: too many connections from …",
    and over `connection_rate` new connections per `time_unit` with "421 4.7.0 … Error: too many
    connections from …" too. Refused connections and MAIL FROMs count toward the rates as well."""

    messages: int = 0
    connections: int = 0
    connection_rate: int = 0
    time_unit: int = 60


class PostfixServer(ChildProcess):
    """A private Postfix on `host`:`port` that accepts mail for `domains` (and for any domain from loopback
    clients when `relay` is set, as a smarthost does) and passes it to `next_hop` ("127.0.0.1:2525").

    With `certificate` (certificate chain file, key file) it offers STARTTLS. With `mailboxes`, an MX
    knows its domains' users: any other recipient is refused at RCPT as Postfix does with
    relay_recipient_maps ("550 5.1.1 <…>: Recipient address rejected: User unknown in relay recipient
    table"). `recipient_access` maps an address to the reply its RCPT gets (check_recipient_access,
    access(5): "550 5.7.1 Sender blocked"); `policy_service` ("127.0.0.1:10023") is asked at RCPT, as
    postgrey is (tests/harness/postgrey.py). Start within seconds; `stop` ends it and deletes its directories."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        next_hop: str,
        domains: tuple[str, ...] = (),
        relay: bool = False,
        hostname: str = "postfix.test",
        certificate: tuple[Path, Path] | None = None,
        limits: ClientLimits = ClientLimits(),
        mailboxes: tuple[str, ...] | None = None,
        recipient_access: dict[str, str] | None = None,
        policy_service: str = "",
    ) -> None:
        assert POSTFIX, "Postfix is not installed (.ci/run installs Debian's postfix package)"
        self.host, self.port = host, port
        self.directory = Path(tempfile.mkdtemp(prefix="postfix-"))
        self.config = self.directory / "etc"
        self.next_hop, self.domains, self.relay, self.hostname = next_hop, domains, relay, hostname
        self.certificate, self.limits = certificate, limits
        self.mailboxes, self.recipient_access = mailboxes, recipient_access or {}
        self.policy_service = policy_service
        super().__init__(
            [POSTFIX, "-c", str(self.config), "start-fg"], name="postfix", env=dict(os.environ), ready=self.greets
        )

    def start(self) -> None:
        self._write_configuration()
        super().start()

    def stop(self) -> None:
        """SIGTERM the master (it ends its daemons), then reap `postfix start-fg`, which waits for it."""
        # The master runs in a session of its own (`master -s`): signalling the child's group misses it.
        with suppress(FileNotFoundError, ValueError, ProcessLookupError):
            os.kill(int((self.directory / "queue/pid/master.pid").read_text()), signal.SIGTERM)
        super().stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        """Postfix's log so far (smtpd's "TLS connection established from …", the deliveries)."""
        return self.log_path.read_text(errors="replace")

    def connections(self) -> int:
        """The connections smtpd has accepted so far (its "connect from" lines), readiness probes included."""
        return self.log().count("]: connect from ")

    def greets(self) -> bool:
        try:
            with smtplib.SMTP(self.host, self.port, timeout=1) as smtp:
                return smtp.noop()[0] == 250
        except (OSError, smtplib.SMTPException):
            return False

    def _write_configuration(self) -> None:
        self.directory.chmod(0o755)  # the daemons run as the postfix user and must reach the queue
        data = self.directory / "data"
        for directory in (self.config, self.directory / "queue", data):
            directory.mkdir(exist_ok=True)
        shutil.chown(data, "postfix")
        (self.config / "main.cf").write_text(self._main_cf())
        listener = f"{self.host}:{self.port} inet n - n - - smtpd\n"
        (self.config / "master.cf").write_text(listener + MASTER_SERVICES)

    def _main_cf(self) -> str:
        limits = self.limits
        parameters: dict[str, object] = {
            "compatibility_level": "3.6",
            "queue_directory": self.directory / "queue",
            "data_directory": self.directory / "data",
            # As root, the daemons drop to these (Debian's package creates both).
            "mail_owner": "postfix",
            "setgid_group": "postdrop",
            "myhostname": self.hostname,
            "mydestination": "",
            # Postfix accepts only an interface's own address here; 127.0.0.x (routed to lo, not on it)
            # is named in master.cf's listener instead, which overrides this for smtpd.
            "inet_interfaces": "127.0.0.1",
            "inet_protocols": "ipv4",
            "relay_domains": ", ".join(self.domains),
            "mynetworks": "127.0.0.0/8" if self.relay else "",
            "relay_transport": self._next_hop_transport(),
            "default_transport": self._next_hop_transport(),
            # No DNS here: no reverse lookup of clients, no lookup of the (bracketed) next hop.
            "smtpd_peername_lookup": "no",
            "smtp_host_lookup": "native",
            "alias_maps": "",
            "alias_database": "",
            "biff": "no",
            "maillog_file": "/dev/stdout",
            # The default exempts $mynetworks, i.e. every loopback client of a relay.
            "smtpd_client_event_limit_exceptions": "",
            "smtpd_client_message_rate_limit": limits.messages,
            "smtpd_client_connection_count_limit": limits.connections,
            "smtpd_client_connection_rate_limit": limits.connection_rate,
            "anvil_rate_time_unit": f"{limits.time_unit}s",
        }
        if self.certificate is not None:
            parameters |= self._tls_parameters(*self.certificate)
        if self.mailboxes is not None:
            parameters["relay_recipient_maps"] = self._texthash("mailboxes", dict.fromkeys(self.mailboxes, "OK"))
        restrictions = []
        if self.recipient_access:
            restrictions.append(f"check_recipient_access {self._texthash('recipient_access', self.recipient_access)}")
        if self.policy_service:
            restrictions.append(f"check_policy_service inet:{self.policy_service}")
        if restrictions:
            parameters["smtpd_recipient_restrictions"] = ", ".join(restrictions)
        return "".join(f"{name} = {value}\n" for name, value in parameters.items())

    def _texthash(self, name: str, entries: dict[str, str]) -> str:
        """A lookup table (texthash: read as it is, no postmap) of `entries`, named for main.cf."""
        table = self.config / name
        table.write_text("".join(f"{key} {value}\n" for key, value in entries.items()))
        return f"texthash:{table}"

    def _next_hop_transport(self) -> str:
        """smtp:[address]:port: brackets, so Postfix looks up no MX for it."""
        address, _, port = self.next_hop.rpartition(":")
        return f"smtp:[{address}]:{port}"

    def _tls_parameters(self, chain: Path, key: Path) -> dict[str, object]:
        # Copied next to main.cf: smtpd reads them as root, from a directory root owns.
        shutil.copy(chain, self.config / "chain.pem")
        shutil.copy(key, self.config / "key.pem")
        (self.config / "key.pem").chmod(0o600)
        return {
            "smtpd_tls_security_level": "may",
            "smtpd_tls_chain_files": f"{self.config / 'key.pem'}, {self.config / 'chain.pem'}",
            "smtpd_tls_received_header": "yes",
            "smtpd_tls_loglevel": 1,
        }

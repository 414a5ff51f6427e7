"""One pause concept: may a domain send now, and if not, why.

Three switches stop sending: the global switch (the one SendingControl row), an operator's pause
of one domain, and the automatic safeguard pause of one domain (messaging/safeguards.py). Each is a
`Pause` here, whatever row it is stored in. Every path that must honour them asks this module:
the API's accept path (messaging/services.py, in Python and inside its PostgreSQL statement),
dispatch (messaging/outbound/dispatch.py: the claim and the lease renewal), the console and the safeguard.
"""

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from django.db import connection
from django.db.models import Exists, Q

from domains.models import Domain, SendingControl
from mailservice.console import console_time
from mailservice.errors import ApiError, ErrorCode, SendingPaused, ValidationFailed


class PauseKind(StrEnum):
    GLOBAL = "global"  # every domain, by an operator
    OPERATOR = "operator"  # one domain, by an operator
    SAFEGUARD = "safeguard"  # one domain, by the bounce and complaint safeguard


@dataclass(frozen=True)
class Pause:
    kind: PauseKind
    paused_at: datetime | None
    paused_by: str
    reason: str

    def describe(self) -> str:
        """Who paused, when and why, for the console."""
        when = console_time(self.paused_at) if self.paused_at else "an unknown time"
        return f"by {self.paused_by or 'unknown'} at {when}: {self.reason or 'no reason given'}"


def domain_pause(domain: Domain) -> Pause | None:
    """The domain's own pause (an operator's or the safeguard's), from the row as read: no query."""
    if not domain.sending_paused:
        return None
    kind = PauseKind.SAFEGUARD if domain.auto_paused else PauseKind.OPERATOR
    return Pause(kind, domain.paused_at, domain.paused_by, domain.pause_reason)


def global_pause() -> Pause | None:
    """The global switch's pause, or None while sending is on (one query)."""
    control = SendingControl.objects.filter(pk=1, paused=True).first()
    if control is None:
        return None
    return Pause(PauseKind.GLOBAL, control.paused_at, control.paused_by, control.pause_reason)


def global_paused() -> bool:
    return SendingControl.objects.filter(pk=1, paused=True).exists()


def switch_pause(*, domain: Domain | None) -> Pause | None:
    """The pause of one switch: the domain's own (domain given) or the global one (None)."""
    return domain_pause(domain) if domain is not None else global_pause()


def domain_unpaused(domain_path: str = "domain") -> Q:
    """For querysets of rows belonging to a domain: the domain's own switch is on."""
    return Q(**{f"{domain_path}__sending_paused": False})


def unpaused(domain_path: str = "domain") -> Q:
    """For querysets of rows belonging to a domain: neither the global switch nor the domain is paused."""
    return ~Exists(SendingControl.objects.filter(pk=1, paused=True)) & domain_unpaused(domain_path)


def global_paused_sql() -> str:
    """The global switch as an SQL boolean expression, for the hand-written PostgreSQL statements."""
    table = connection.ops.quote_name(SendingControl._meta.db_table)
    return f'EXISTS (SELECT 1 FROM {table} WHERE "id" = 1 AND "paused")'  # noqa: S608 - identifiers only


_NOT_SENT = "production sending is not activated for this domain; no message was sent"
REASON_CHARS = 200


def pause_message(pause: Pause | None = None) -> str:
    """The 503 `SendingPaused` message: which pause holds the send and why, then what the spec requires it to
    say. None is the global switch as the accept statement reports it: its reason is read then. The
    operator's reason is shown (one line, at most REASON_CHARS): without it a paused tutorial domain read
    like one never activated; the safeguard's names the rate that tripped it."""
    if pause is None:
        pause = global_pause() or Pause(PauseKind.GLOBAL, None, "", "")
    if pause.kind == PauseKind.SAFEGUARD:
        why = pause.reason.removeprefix("Automatic pause: ") or "the bounce or complaint rate is over its limit"
        return f"Sending is paused for this domain automatically ({why}): {_NOT_SENT}"
    reason = " ".join(pause.reason.split())[:REASON_CHARS]
    because = f" ({reason})" if reason else ""
    where = "globally" if pause.kind == PauseKind.GLOBAL else "for this domain"
    return f"Sending is paused {where} by an operator{because}: {_NOT_SENT}"


def sending_paused_error(pause: Pause | None = None) -> SendingPaused:
    return SendingPaused(pause_message(pause))


def send_refusal(*, domain: Domain) -> ApiError | None:
    """Why the domain may not send now, from its row as read (no query), in the spec's order:
    not verified (400), then its own pause (503). The global pause and the daily allowance are
    checked where the message is stored, in the same statement or transaction."""
    if not domain.verified:
        return ValidationFailed(f"The domain {domain.name} is not verified", code=ErrorCode.DOMAIN_NOT_VERIFIED)
    pause = domain_pause(domain)
    if pause is not None:
        return sending_paused_error(pause)
    return None

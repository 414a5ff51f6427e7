"""What a receiver's reply means beyond its code: "slow down", or "fix your authentication".

A small table, read top to bottom, first match wins. Each rule names the reply code(s), the
enhanced status (RFC 3463) it matches (exactly, or a detail range), and optionally a marker in the
text. Two verdicts:

- THROTTLE: the receiver (or the relay) asks to send more slowly. Dispatch lowers the destination's
  rate (messaging/outbound/relay_limits.py), puts the message back without using an attempt and
  retries within seconds, at any stage of the conversation (greeting, MAIL, RCPT, DATA).
- AUTHENTICATION: a permanent refusal because a sender authentication check failed; the recipient
  fails with a detail naming the check to fix (the receiver's reply text is kept).

Sources (read 2026-11):
- Gmail: https://support.google.com/a/answer/3726730 ("Gmail SMTP errors and codes"): 421 4.7.0
  (unusual rate, "try again later, closing connection"), 421 4.7.28 (rate limited for not meeting
  the sender guidelines), 450 4.2.1 ("receiving mail too quickly"), 550 5.7.25 (no PTR), 550 5.7.26
  (fails DMARC / unauthenticated), 550 5.7.27 (fails SPF).
- Yahoo: https://senders.yahooinc.com/smtp-error-codes/ : 421 4.7.0 [TSS04] / [TS01]..[TS03]
  ("temporarily deferred due to unexpected volume or user complaints"); 554 5.7.9 (message not
  accepted for policy reasons: the 2024 authentication requirements).
- Microsoft: https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online
  451 4.7.500-699 (IP throttling, e.g. 4.7.650 "temporarily rate limited due to IP reputation");
  550 5.7.509 (fails DMARC with p=reject); 550 5.7.515 (the sending domain does not meet the
  required authentication level: SPF, DKIM and DMARC for high-volume senders to consumer mailboxes).
- Postfix: https://www.postfix.org/postconf.5.html (smtpd_client_message_rate_limit and friends,
  answered "450 4.7.1 Error: too much mail from …"); a relay or MX that closes with 421 at connect
  or greeting (RFC 5321 §3.8, §4.2.5: "service not available, closing transmission channel").

Deliberately not here: 452 4.5.3 (too many recipients in one transaction) limits a transaction,
not a rate; 452 4.2.2 (mailbox full) is about one mailbox: both stay ordinary temporary failures.
"""

from dataclasses import dataclass
from enum import StrEnum

from messaging.outbound.transports import Reply


class Verdict(StrEnum):
    THROTTLE = "throttle"
    AUTHENTICATION = "authentication"


@dataclass(frozen=True)
class Rule:
    provider: str
    codes: frozenset[int]
    status: str  # enhanced status class.subject ("4.7") or a full code ("4.7.28"); "" matches any
    verdict: Verdict
    details: range | None = None  # with a class.subject status: the detail numbers it covers
    marker: str = ""  # text the reply must contain (case-insensitive), e.g. Yahoo's "[TSS04]"
    fix: str = ""  # AUTHENTICATION: what the sender must fix, shown in the recipient's detail

    def matches(self, reply: Reply) -> bool:
        if reply.code not in self.codes or (self.marker and self.marker.lower() not in reply.text.lower()):
            return False
        if not self.status:
            return True
        status = reply.enhanced_status
        if self.details is None:
            return status == self.status or (status.startswith(f"{self.status}.") and self.status.count(".") == 1)
        prefix, _, detail = status.rpartition(".")
        return prefix == self.status and detail.isdigit() and int(detail) in self.details


_DMARC = "DMARC (publish a DMARC record and align the DKIM signature's d= or the SPF domain with the From: domain)"
_SPF = "SPF (list every sending address in the return-path domain's SPF record)"
_PTR = "PTR (give each sending address a reverse DNS name that resolves back to it, matching the HELO name)"
_ALL = "SPF, DKIM and DMARC (publish all three, with DMARC aligned to the From: domain)"

RULES: tuple[Rule, ...] = (
    # Throttles: a provider's own code first (for the record), then the generic ones.
    Rule("gmail", frozenset({421}), "4.7.28", Verdict.THROTTLE),
    Rule("gmail", frozenset({450}), "4.2.1", Verdict.THROTTLE),
    Rule("yahoo", frozenset({421}), "4.7.0", Verdict.THROTTLE, marker="[TSS04]"),
    *(Rule("yahoo", frozenset({421}), "4.7.0", Verdict.THROTTLE, marker=f"[TS0{n}]") for n in (1, 2, 3)),
    Rule("microsoft", frozenset({451}), "4.7", Verdict.THROTTLE, details=range(500, 700)),
    Rule("postfix", frozenset({450}), "4.7.1", Verdict.THROTTLE),
    # Any 421 closes the channel (RFC 5321 §3.8): at connect or greeting it is how a relay or MX at
    # its connection or rate limit answers; 451/454 4.7.x are policy deferrals ("try later").
    Rule("any", frozenset({421}), "", Verdict.THROTTLE),
    Rule("any", frozenset({451, 454}), "4.7", Verdict.THROTTLE),
    # Permanent authentication refusals.
    Rule("gmail", frozenset({550}), "5.7.26", Verdict.AUTHENTICATION, fix=_DMARC),
    Rule("gmail", frozenset({550}), "5.7.25", Verdict.AUTHENTICATION, fix=_PTR),
    Rule("gmail", frozenset({550}), "5.7.27", Verdict.AUTHENTICATION, fix=_SPF),
    Rule("microsoft", frozenset({550}), "5.7.509", Verdict.AUTHENTICATION, fix=_DMARC),
    Rule("microsoft", frozenset({550}), "5.7.515", Verdict.AUTHENTICATION, fix=_ALL),
    Rule("yahoo", frozenset({554}), "5.7.9", Verdict.AUTHENTICATION, fix=_ALL),
)


def matching_rule(reply: Reply) -> Rule | None:
    """The first rule of RULES that `reply` matches."""
    return next((rule for rule in RULES if rule.matches(reply)), None)


def is_throttle(reply: Reply) -> bool:
    """A "slow down" reply: lower the destination's rate and retry within seconds, without an attempt."""
    rule = matching_rule(reply)
    return rule is not None and rule.verdict is Verdict.THROTTLE


def explained(reply: Reply) -> str:
    """The reply as an event detail: its text, and for an authentication refusal which check to fix."""
    rule = matching_rule(reply)
    if rule is None or rule.verdict is not Verdict.AUTHENTICATION:
        return str(reply)
    return f"{reply} — fix: {rule.fix}"

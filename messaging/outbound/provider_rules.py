"""Which receivers' replies mean "slow down".

A small table, read top to bottom, first match wins. Each rule names the reply code(s), the
enhanced status (RFC 3463) it matches (exactly, or a detail range), and optionally a marker in the
text. A THROTTLE: the receiver (or the relay) asks to send more slowly. Dispatch lowers the
destination's rate (messaging/outbound/fleet_limits.py), puts the message back without using an
attempt and retries within seconds, at any stage of the conversation (greeting, MAIL, RCPT, DATA).
Why a reply refused or deferred mail (authentication, reputation, rate, ...) is another question,
answered for every failure reply by messaging/refusals.py.

Sources (read 2026-11):
- Gmail: https://support.google.com/a/answer/3726730 ("Gmail SMTP errors and codes"): 421 4.7.0
  (unusual rate, "try again later, closing connection"), 421 4.7.28 (rate limited for not meeting
  the sender guidelines), 450 4.2.1 ("receiving mail too quickly").
- Yahoo: https://senders.yahooinc.com/smtp-error-codes/ : 421 4.7.0 [TSS04] / [TS01]..[TS03]
  ("temporarily deferred due to unexpected volume or user complaints").
- Microsoft: https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online
  451 4.7.500-699 (IP throttling, e.g. 4.7.650 "temporarily rate limited due to IP reputation").
- Postfix: https://www.postfix.org/postconf.5.html (smtpd_client_message_rate_limit and friends,
  answered "450 4.7.1 Error: too much mail from …"); a relay or MX that closes with 421 at connect
  or greeting (RFC 5321 §3.8, §4.2.5: "service not available, closing transmission channel").

Deliberately not here: 452 4.5.3 (too many recipients in one transaction) limits a transaction,
not a rate; 452 4.2.2 (mailbox full) is about one mailbox: both stay ordinary temporary failures.
Greylisting asks for a delay, not a lower rate: a reply messaging/outbound/greylisting.py recognises is
no throttle, whichever rule its code matches.
"""

from dataclasses import dataclass

from messaging.outbound.envelope import Reply
from messaging.outbound.greylisting import is_greylisting


@dataclass(frozen=True)
class Rule:
    provider: str
    codes: frozenset[int]
    status: str  # enhanced status class.subject ("4.7") or a full code ("4.7.28"); "" matches any
    details: range | None = None  # with a class.subject status: the detail numbers it covers
    marker: str = ""  # text the reply must contain (case-insensitive), e.g. Yahoo's "[TSS04]"

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


RULES: tuple[Rule, ...] = (
    # A provider's own code first (for the record), then the generic ones.
    Rule("gmail", frozenset({421}), "4.7.28"),
    Rule("gmail", frozenset({450}), "4.2.1"),
    Rule("yahoo", frozenset({421}), "4.7.0", marker="[TSS04]"),
    *(Rule("yahoo", frozenset({421}), "4.7.0", marker=f"[TS0{n}]") for n in (1, 2, 3)),
    Rule("microsoft", frozenset({451}), "4.7", details=range(500, 700)),
    Rule("postfix", frozenset({450}), "4.7.1"),
    # Any 421 closes the channel (RFC 5321 §3.8): at connect or greeting it is how a relay or MX at
    # its connection or rate limit answers; 451/454 4.7.x are policy deferrals ("try later").
    Rule("any", frozenset({421}), ""),
    Rule("any", frozenset({451, 454}), "4.7"),
)


def matching_rule(reply: Reply) -> Rule | None:
    """The first rule of RULES that `reply` matches."""
    return next((rule for rule in RULES if rule.matches(reply)), None)


def is_throttle(reply: Reply) -> bool:
    """A "slow down" reply: lower the destination's rate and retry within seconds, without an attempt.
    Greylisting is none, though its "451 4.7.1" matches a rule: it asks for a delay, not a lower rate."""
    return matching_rule(reply) is not None and not is_greylisting(reply)

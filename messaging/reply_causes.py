"""Why a receiver refused or deferred mail: a `cause` read from its reply's codes, and for an
authentication refusal the readiness check to fix (messaging/readiness/dns_checks.py, messaging/readiness/check.py).

One classifier for both places a reply is read: dispatch's SMTP replies (messaging/outbound/outcomes.py)
and the reports that come back later (DSNs, messaging/inbound/services.py). A table read top to
bottom, first match wins: the providers' own codes, then RFC 3463's classes, then words of the text
(blocklists, rates), then the class of the code; a failure nothing explains is `other`.

Sources (read 2026-11):
- RFC 3463 (enhanced status codes: X.1.x addressing, X.2.x mailbox, X.7.x security or policy) and
  RFC 7372 (X.7.20-X.7.22 DKIM, X.7.23/X.7.24 SPF, X.7.25 reverse DNS, X.7.26 several checks failed).
- Gmail, https://support.google.com/a/answer/3726730 ("Gmail SMTP errors and codes") and the sender
  guidelines FAQ: 4.7.26/5.7.26 unauthenticated (DMARC), 4.7.27/5.7.27 SPF does not pass, 4.7.30/
  5.7.30 DKIM does not pass, 4.7.31 and 4.7.40/5.7.40 no DMARC policy, 4.7.32/5.7.32 From: not
  aligned, 4.7.25/5.7.25 no PTR, 4.7.24/5.7.24 a suspicious SPF record; 421 4.7.28 and 421 4.7.0
  "unusual rate" rate limited; 550 5.7.28 and 550 5.7.1 "likely unsolicited mail" blocked for
  reputation; 450 4.2.1 "receiving mail too quickly". (Sisimai's Google table, lib/Sisimai/Rhost/
  Google.pm, reads the same codes.)
- Microsoft, https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online
  and https://learn.microsoft.com/exchange/troubleshoot/antispam/hotmail-outlook-error-codes :
  550 5.7.509 fails DMARC with p=reject; 550 5.7.515 below the required authentication level (SPF,
  DKIM and a passing DMARC for high-volume senders, since May 2025: DMARC is what fails); 451
  4.7.500-699 IP throttling, 4.7.650 "rate limited due to IP reputation"; 550 5.7.606-649 "banned
  sending IP", 5.7.708 "traffic not accepted from this IP"; 550 5.7.1 "... on our block list (S3150)"
  and (S3140), the Outlook.com blocklist.
- Yahoo, https://senders.yahooinc.com/smtp-error-codes/ : 421 4.7.0 [TSS04], [TS01]-[TS03]
  "temporarily deferred due to unexpected volume or user complaints"; 554 5.7.9 "message not accepted
  for policy reasons" (the 2024 authentication requirements); 553 5.7.1 [BL21]/[BL23] "the ip is in
  Spamhaus's list".
"""

import re
from dataclasses import dataclass

from messaging.models import ReplyCause

# A reply's text is read this far: the codes and the words that matter come first.
TEXT_LIMIT = 2000

# A failure status (RFC 3463 class 4 or 5), as a whole or in a reply's text.
STATUS = re.compile(r"[45]\.\d{1,3}\.\d{1,3}")
STATUS_IN_TEXT = re.compile(r"\b[45]\.\d{1,3}\.\d{1,3}\b")

# Readiness check ids (messaging/readiness/dns_checks.py) an authentication refusal points at.
DMARC, SPF, DKIM, PTR, ALIGNMENT = "dmarc", "spf", "dkim", "ptr", "alignment"
FIX_CHECKS = (SPF, DKIM, DMARC, ALIGNMENT, PTR)


@dataclass(frozen=True)
class CauseRule:
    status: str  # "X.7.26": class 4 or 5; "5.7.28": that class only; "X.7": the subject (any detail); "" any
    cause: ReplyCause
    check: str = ""  # AUTHENTICATION: the readiness check id to fix
    marker: str = ""  # lower-case text the reply must contain
    details: range | None = None  # with a class.subject status ("X.7"): the detail numbers it covers

    def matches(self, status: str, text: str) -> bool:
        """`status`: the reply's enhanced status ("5.7.26" or ""); `text`: its lower-cased text."""
        if self.marker and self.marker not in text:
            return False
        return not self.status or _status_matches(self.status, status, self.details)


def _status_matches(pattern: str, status: str, details: range | None) -> bool:
    if not status:
        return False
    wanted, found = pattern.split("."), status.split(".")
    if wanted[0] not in ("X", found[0]) or wanted[1:] != found[1 : len(wanted)]:
        return False
    return details is None or int(found[2]) in details


_A = ReplyCause.AUTHENTICATION

RULES: tuple[CauseRule, ...] = (
    # Gmail's authentication codes, both the deferral (4.7.x) and the refusal (5.7.x); RFC 7372's.
    CauseRule("X.7.26", _A, DMARC),
    CauseRule("X.7.27", _A, SPF),
    CauseRule("X.7.23", _A, SPF),
    CauseRule("X.7.24", _A, SPF),
    CauseRule("X.7.30", _A, DKIM),
    CauseRule("X.7.20", _A, DKIM),
    CauseRule("X.7.21", _A, DKIM),
    CauseRule("X.7.31", _A, DMARC),
    CauseRule("X.7.40", _A, DMARC),
    CauseRule("X.7.32", _A, ALIGNMENT),
    CauseRule("X.7.22", _A, ALIGNMENT),
    CauseRule("X.7.25", _A, PTR),
    # Microsoft.
    CauseRule("5.7.509", _A, DMARC),
    CauseRule("5.7.515", _A, DMARC),
    CauseRule("4.7.650", ReplyCause.REPUTATION),
    CauseRule("X.7", ReplyCause.REPUTATION, details=range(606, 650)),
    CauseRule("5.7.708", ReplyCause.REPUTATION),
    CauseRule("4.7", ReplyCause.RATE_LIMITED, details=range(500, 700)),
    # Yahoo: 5.7.9 is RFC 3463's "authentication mechanism too weak", used for its sender requirements.
    CauseRule("X.7.9", _A, DMARC),
    *(CauseRule("4.7", ReplyCause.RATE_LIMITED, marker=m) for m in ("[tss04]", "[ts01]", "[ts02]", "[ts03]")),
    # Gmail's rate and reputation codes.
    CauseRule("4.7.28", ReplyCause.RATE_LIMITED),
    CauseRule("4.7.0", ReplyCause.RATE_LIMITED, marker="unusual rate"),
    CauseRule("5.7.28", ReplyCause.REPUTATION),
    CauseRule("X.2.1", ReplyCause.RATE_LIMITED, marker="too quickly"),
    # RFC 3463: the recipient's address (X.1.x but the sender's, X.1.7/X.1.8) or mailbox (X.2.x).
    CauseRule("X.1.7", ReplyCause.POLICY),
    CauseRule("X.1.8", ReplyCause.POLICY),
    CauseRule("X.1", ReplyCause.MAILBOX),
    CauseRule("X.2", ReplyCause.MAILBOX),
    # Words, whatever the code: blocklists and reputation, then rates.
    *(
        CauseRule("", ReplyCause.REPUTATION, marker=marker)
        for marker in (
            "block list",  # Outlook.com (S3150), (S3140), SC-001
            "blocklist",
            "blacklist",
            "spamhaus",
            "spamcop",
            "barracuda",
            "dnsbl",
            "banned sending ip",
            "reputation",
            "unsolicited",  # Gmail 5.7.1 "likely unsolicited mail"
        )
    ),
    *(
        CauseRule("", ReplyCause.RATE_LIMITED, marker=marker)
        for marker in ("rate limit", "ratelimit", "too many connections", "too many messages", "too much mail")
        + ("too quickly", "unusual rate", "throttl")
    ),
    # The rest of RFC 3463's security and policy class: delivery not authorized, greylisting, TLS required.
    CauseRule("X.7", ReplyCause.POLICY),
    # Without an enhanced status (RFC 3463 is optional), the usual words for an unknown or full mailbox.
    *(
        CauseRule("", ReplyCause.MAILBOX, marker=marker)
        for marker in ("user unknown", "unknown user", "no such user", "mailbox unavailable", "does not exist")
        + ("mailbox full", "over quota")
    ),
)


@dataclass(frozen=True)
class Explained:
    cause: str  # a ReplyCause; "" for a reply that is no failure
    check: str = ""  # AUTHENTICATION: the readiness check id to fix

    def note(self, domain: str) -> str:
        """The explanation for an event's detail, e.g.
        " (cause: authentication — fix the dmarc check: manage.py check_readiness acme.test)"."""
        if self.cause in ("", ReplyCause.OTHER):
            return ""  # "other" explains nothing the reply does not say: the field alone records it
        if not self.check:
            return f" (cause: {self.cause})"
        return f" (cause: {self.cause} — fix the {self.check} check: manage.py check_readiness {domain})"


NO_CAUSE = Explained("")


def reply_cause(code: int | None, enhanced_status: str, text: str) -> tuple[str, str]:
    """(cause, readiness check id or "") of a receiver's failure reply: its SMTP `code` (None when a
    report gives only the enhanced status), `enhanced_status` ("5.7.26" or "") and `text`.
    ("", "") when the reply is no failure (2xx, 3xx, or neither a code nor a 4.x.x/5.x.x status)."""
    explained = explain(code, enhanced_status, text)
    return explained.cause, explained.check


def explain(code: int | None, enhanced_status: str, text: str) -> Explained:
    """reply_cause's answer as a value, with the detail's wording (`Explained.note`)."""
    lowered = text[:TEXT_LIMIT].lower()
    status = _specific_status(enhanced_status, lowered)
    failed = code is not None and 400 <= code < 600
    if not failed and (code is not None or not status):
        return NO_CAUSE
    rule = next((rule for rule in RULES if rule.matches(status, lowered)), None)
    if rule is None:
        return Explained(ReplyCause.OTHER.value)
    return Explained(rule.cause.value, rule.check)


def _specific_status(enhanced_status: str, text: str) -> str:
    """The failure status to read: the one given, unless it is the generic X.0.0 (a DSN's "Status: 5.0.0"
    over a "Diagnostic-Code: smtp; 550 5.7.606 ...") and the text names a more specific one."""
    status = enhanced_status if STATUS.fullmatch(enhanced_status) else ""
    if status and not status.endswith(".0.0"):
        return status
    named = STATUS_IN_TEXT.search(text)
    return named.group() if named and not named.group().endswith(".0.0") else status

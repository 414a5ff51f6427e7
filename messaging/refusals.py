"""Why a receiver refused or deferred mail: one classifier for every refusal, whoever says it.

`classify_refusal(code, enhanced_status, text, speaker)` reads a reply (its RFC 5321 code, its RFC 3463
enhanced status and its text) into a `Verdict`: a **reason** from a fixed set (`RefusalReason`),
hard or soft, whether it suppresses the recipient, the compatibility `cause` derived from the reason,
and for an authentication refusal the readiness check to fix. It is called for dispatch's SMTP replies
in both modes (messaging/outbound/outcomes.py: an MX in direct delivery, or the relay), for the sandbox
(messaging/outbound/sandbox.py) and for every report that comes back later (DSNs and plain-text
bounces, messaging/inbound/services.py), so that the same refusal gets the same verdict on every path.

Rules, read top to bottom, first match wins:
1. providers' own codes and words that name the sender as the problem (a blocklist, a request to
   confirm or be whitelisted, authentication), whatever the status says: a Postfix DSN relaying
   "550 Your server requires confirmation … Whitelist.aspx?IP=…" with `Status: 5.0.0` is `blocked`;
2. RFC 3463's specific statuses (X.1.x addressing, X.2.x mailbox, X.3.x system, X.4.x network,
   X.5.x protocol, X.6.x content, X.7.x security and policy; RFC 7372 for X.7.20-X.7.26, RFC 7505
   for X.1.10);
3. words for what a status does not say (or where there is none: RFC 3463 is optional);
4. the RFC 5321 reply code (§4.2.2-4.2.3: 551 user not local, 552 storage, 553 mailbox name not
   allowed); a failure nothing explains is `other`.

Hard or soft: the class of the enhanced status, else of the reply code (5 hard, 4 soft), except that
a full mailbox, a rate limit, greylisting, an unreachable host and an expired message are always soft
(RFC 3463 §3.3: X.2.2 "is useful for both permanent and persistent transient errors"; RFC 5321 §4.5.3.1.10
tells clients to treat 552 on RCPT as temporary). Only the recipient's own permanent failures suppress
(`SUPPRESSING`): an unknown user, a disabled mailbox, a domain that does not exist; and never the
service's own verdict (`Speaker.SERVICE`: a DNS answer this machine got), which says nothing a
receiver confirmed. The sender's refusals (`SENDER_REASONS`) count toward the sending domain's health
instead (messaging/selectors.py, `domain_refusal_health`).

Sources (read 2026-12):
- RFC 3463 (enhanced status codes), RFC 7372 (X.7.20-X.7.22 DKIM, X.7.23/X.7.24 SPF, X.7.25 reverse DNS,
  X.7.26 several checks failed), RFC 7505 (X.1.10 null MX), RFC 5321 §4.2 (reply codes), RFC 6647
  (greylisting).
- Gmail, https://support.google.com/a/answer/3726730 ("Gmail SMTP errors and codes"): 550 5.1.1 "does
  not exist", 452/552 5.2.2 "over quota", 550 5.2.1 "account disabled", 4.7.26/5.7.26 DMARC, 5.7.27
  SPF, 5.7.30 DKIM, 5.7.32 alignment, 5.7.25 PTR; 421 4.7.28 "temporarily rate limited"; 421 4.7.0 and
  550 5.7.28 "unusual rate of unsolicited mail … (temporarily) blocked" (blocked: the IP or domain, not
  the message); 550 5.7.1 "likely unsolicited mail" (spam);
  450 4.2.1 "receiving mail too quickly"; 552 5.7.0 "blocked because its content presents a potential
  security issue" and 552 5.3.4 "exceeds size limit"; 421 4.7.0 "TLS required" (policy).
- Microsoft, https://learn.microsoft.com/exchange/mail-flow-best-practices/non-delivery-reports-in-exchange-online/non-delivery-reports-in-exchange-online
  and https://learn.microsoft.com/exchange/troubleshoot/antispam/hotmail-outlook-error-codes :
  550 5.1.10 recipient not found, 5.7.509/5.7.515 authentication, 451 4.7.500-699 throttling,
  4.7.650 IP reputation, 5.7.606-649 banned IP, 5.7.708 traffic not accepted from this IP, 550 5.7.1
  "on our block list (S3150)", 5.4.1 "Recipient address
  rejected: Access denied" (directory-based edge blocking: the address does not exist).
- Yahoo, https://senders.yahooinc.com/smtp-error-codes/ : 421 4.7.0 [TSS04]/[TS01]-[TS03] deferred for
  volume or complaints; 554 5.7.9 policy (its authentication requirements); 553 5.7.1 [BL21]/[BL23]
  Spamhaus; 554 delivery error "This user doesn't have a yahoo.com account" and "account has been
  disabled or discontinued".
- Apple iCloud, https://support.apple.com/en-us/HT204137 and its quoted replies: 550 5.1.1 "user does
  not exist", 421 4.7.1 "deferred due to excessive volume", 550 5.7.1 [CS01] "rejected due to local
  policy", 554 5.7.1 "rejected due to … DMARC policy", 550 5.7.1 "… domain present in the Spamhaus DBL".
- Comcast, http://postmaster.comcast.net/mail-error-codes.aspx : BL000000-BL000111 blocklisted sources,
  ES000001/ES000010 dynamic space, RL000001 rate, "421 Too many sessions opened", "Reverse DNS failure".
- GMX and WEB.DE, https://postmaster.gmx.com/en/error-messages : replies without enhanced status
  ("554 … IP address is block listed", "550 Requested action not taken: mailbox unavailable",
  "User is unknown", "User is inactive", "exhausted allowed storage space").
- Mail.ru, its replies as quoted at https://mailout.ru/2015/09 and
  https://errorsmaster.ru/oshibka-550-spam-message-rejected (help.mail.ru itself was not reachable here):
  "550 spam message rejected", "User quota exceeded", "User not found", "No such user".
- MTAs' own wording where a reply carries no enhanced status, from their documentation: Postfix
  (postconf(5): reject_unknown_client_hostname, reject_unknown_sender_domain, "User unknown in … table"),
  Exim (its specification: "Unrouteable address", "retry timeout exceeded", "all relevant MX records point
  to non-existent hosts"), qmail (qmail-send(8), qmail-smtpd(8) badmailfrom: "Sorry, no mailbox here by
  that name", "I'm not going to try again; this message has been in the queue too long"), Sendmail
  ("User unknown", "Host unknown", "Cannot send message for 5 days"), Lotus Domino and Exchange NDRs.
- Google Groups' own non-delivery notice: "the group you tried to contact may not exist, or you may not
  have permission to post" (no mailbox is said not to exist).
- Yandex, https://yandex.com/support/mail/bounces/other.html and
  https://yandex.com/support/mail/bounces/yandex/message-rejected-under-suspicion-of-spam.html : "No such
  user here", "User not found", "Unrouteable address", "Host or domain name not found" (no such address),
  "Message rejected under suspicion of SPAM", "Sorry, message looks like SPAM to me" (spam; "Client host
  [ip] blocked using …" once a sender sends only spam), "Account is full", "Disk quota exceeded".
"""

import re
from dataclasses import dataclass
from enum import StrEnum

from messaging.models import RefusalReason, ReplyCause

# A reply's text is read this far: the codes and the words that matter come first.
TEXT_LIMIT = 2000

# A failure status (RFC 3463 class 4 or 5), as a whole or in a reply's text.
STATUS = re.compile(r"[45]\.\d{1,3}\.\d{1,3}")
STATUS_IN_TEXT = re.compile(r"\b[45]\.\d{1,3}\.\d{1,3}\b")

# Readiness check ids (messaging/readiness/dns_checks.py) an authentication refusal points at.
DMARC, SPF, DKIM, PTR, ALIGNMENT = "dmarc", "spf", "dkim", "ptr", "alignment"
FIX_CHECKS = (SPF, DKIM, DMARC, ALIGNMENT, PTR)

R = RefusalReason
# The recipient's own permanent failures: the only ones that stop mail to the address for good.
SUPPRESSING = frozenset({R.USER_UNKNOWN, R.MAILBOX_DISABLED, R.DOMAIN_NOT_FOUND})
# The sender's: they say nothing about the address, and count toward the sending domain's health.
SENDER_REASONS = frozenset({R.BLOCKED, R.SPAM_DETECTED, R.AUTHENTICATION, R.POLICY})
# Never a permanent failure, whatever the class says (see the module docstring).
ALWAYS_SOFT = frozenset({R.MAILBOX_FULL, R.RATE_LIMITED, R.GREYLISTED, R.HOST_UNREACHABLE, R.EXPIRED})
# The compatibility `cause` (messaging/models ReplyCause) of each reason.
CAUSE_OF = {
    R.USER_UNKNOWN: ReplyCause.MAILBOX,
    R.MAILBOX_FULL: ReplyCause.MAILBOX,
    R.MAILBOX_DISABLED: ReplyCause.MAILBOX,
    R.DOMAIN_NOT_FOUND: ReplyCause.MAILBOX,
    R.HOST_UNREACHABLE: ReplyCause.OTHER,
    R.BLOCKED: ReplyCause.REPUTATION,
    R.SPAM_DETECTED: ReplyCause.REPUTATION,
    R.CONTENT_REJECTED: ReplyCause.POLICY,
    R.AUTHENTICATION: ReplyCause.AUTHENTICATION,
    R.POLICY: ReplyCause.POLICY,
    R.RATE_LIMITED: ReplyCause.RATE_LIMITED,
    R.GREYLISTED: ReplyCause.POLICY,
    R.EXPIRED: ReplyCause.OTHER,
    R.OTHER: ReplyCause.OTHER,
}


class Speaker(StrEnum):
    """Who said it: a receiver (the recipient's MX in direct delivery, or one a report quotes), the relay
    (relay mode's smarthost, or the MTA that wrote a report speaking for itself), or this service (its
    own routing verdict: a null MX, a domain DNS says does not exist)."""

    RECEIVER = "receiver"
    RELAY = "relay"
    SERVICE = "service"


@dataclass(frozen=True)
class Rule:
    status: str  # "X.7.26": class 4 or 5; "5.7.28": that class only; "X.7": the subject (any detail); "" any
    reason: RefusalReason
    marker: str = ""  # lower-case text the reply must contain
    check: str = ""  # AUTHENTICATION: the readiness check id to fix
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


def _words(reason: RefusalReason, *markers: str, status: str = "") -> tuple[Rule, ...]:
    return tuple(Rule(status, reason, marker) for marker in markers)


A = R.AUTHENTICATION

# 1. The sender is the problem, whatever the status: authentication, blocklists, confirmation requests.
SENDER_FIRST: tuple[Rule, ...] = (
    # RFC 7372 and Gmail's authentication codes, deferrals (4.7.x) and refusals (5.7.x) alike.
    Rule("X.7.26", A, check=DMARC),
    Rule("X.7.27", A, check=SPF),
    Rule("X.7.23", A, check=SPF),
    Rule("X.7.24", A, check=SPF),
    Rule("X.7.30", A, check=DKIM),
    Rule("X.7.20", A, check=DKIM),
    Rule("X.7.21", A, check=DKIM),
    Rule("X.7.31", A, check=DMARC),
    Rule("X.7.40", A, check=DMARC),
    Rule("X.7.32", A, check=ALIGNMENT),
    Rule("X.7.22", A, check=ALIGNMENT),
    Rule("X.7.25", A, check=PTR),
    Rule("5.7.509", A, check=DMARC),  # Microsoft
    Rule("5.7.515", A, check=DMARC),
    Rule("X.7.9", A, check=DMARC),  # Yahoo's sender requirements, RFC 3463's "mechanism too weak"
    # Gmail's unsolicited-mail codes name "your DKIM domain": a rate limit (4.7.28) or a block (5.7.28).
    Rule("4.7.28", R.RATE_LIMITED),
    Rule("5.7.28", R.BLOCKED),
    Rule("", A, "dmarc", check=DMARC),
    Rule("", A, "spf", check=SPF),
    Rule("", A, "dkim", check=DKIM),
    Rule("", A, "reverse dns", check=PTR),
    Rule("", A, "ptr record", check=PTR),
    Rule("", A, "reverse hostname", check=PTR),
    Rule("", A, "unauthenticated", check=DMARC),
    # Postfix reject_unknown_client_hostname ("cannot find your hostname"); forward-confirmed reverse DNS.
    *(Rule("", A, marker, check=PTR) for marker in ("cannot find your hostname", "rdns", "reverse lookup", "ptr")),
    *_words(R.BLOCKED, "requires confirmation", "confirm this mail server", "whitelist", "allowlist"),
    *_words(R.BLOCKED, "block list", "blocklist", "blacklist", "block listed", "blocked using", "listed at"),
    *_words(R.BLOCKED, "spamhaus", "spamcop", "barracuda", "sorbs", "dnsbl", "cloudmark", "senderscore"),
    *_words(R.BLOCKED, "banned sending ip", "[bl2", "bl0000", "es0000", "poor reputation", "low reputation"),
    *_words(R.BLOCKED, "not accepted from this ip", "sender address is blocked", "sender blocked", "your ip"),
    *_words(R.BLOCKED, "dynamic/residential", "dynamic ip", "client host rejected", "unusual rate of unsolicited"),
    *_words(R.BLOCKED, "rejected due to local policy", "[cs01]"),
    # Refusals of the envelope sender (Postfix's "Sender address rejected", a reply to MAIL FROM).
    *_words(R.POLICY, "sender address rejected", "sender domain", "sender verify", "in reply to mail from"),
    # qmail-smtpd(8)'s badmailfrom; Postfix's reject_unverified_sender and reject_unknown_sender_domain.
    *_words(R.POLICY, "envelope sender", "badmailfrom", "sender denied", "sender rejected", "sender address"),
    # Google Groups: "the group you tried to contact may not exist, or you may not have permission to post
    # messages to the group": it names no mailbox that does not exist.
    *_words(R.POLICY, "may not exist", "permission to post"),
)

# 2. Rates, greylisting and spam, by providers' codes and words, before the statuses they reuse.
PROVIDERS: tuple[Rule, ...] = (
    Rule("4.7.650", R.BLOCKED),  # Microsoft: rate limited due to IP reputation
    Rule("X.7", R.BLOCKED, details=range(606, 650)),  # Microsoft: banned sending IP
    Rule("5.7.708", R.BLOCKED),
    Rule("4.7", R.RATE_LIMITED, details=range(500, 700)),  # Microsoft: throttling
    *_words(R.RATE_LIMITED, "[tss04]", "[ts01]", "[ts02]", "[ts03]", "rl000", status="4.7"),  # Yahoo, Comcast
    *_words(R.GREYLISTED, "greylist", "graylist", "grey-list", "gray-list"),
    *_words(R.RATE_LIMITED, "rate limit", "ratelimit", "too many connections", "too many sessions"),
    *_words(R.RATE_LIMITED, "too many messages", "too much mail", "too quickly", "unusual rate", "throttl"),
    *_words(R.RATE_LIMITED, "excessive volume", "unexpected volume", status="4"),
    *_words(R.CONTENT_REJECTED, "virus", "malware", "infected", "attachment", "potential security issue"),
    *_words(R.CONTENT_REJECTED, "message too large", "message size", "too big", "exceeds the max", "too large"),
    *_words(R.CONTENT_REJECTED, "maximum message size", "exceeds size", "size exceeds"),
    *_words(R.SPAM_DETECTED, "spam", "unsolicited", "junk", "bulk mail", "suspicious", "spam score", "scored"),
    # RFC 3463 X.5.3 and RFC 5321 §4.5.3.1.10: too many recipients for one transaction, try the rest later.
    *_words(R.RATE_LIMITED, "too many recipients", "too many concurrent", "connection limit"),
)


def _statuses() -> tuple[Rule, ...]:
    """RFC 3463's specific statuses (and RFC 7505's X.1.10), detail by detail where it says more than its subject."""
    return (
        Rule("X.1.1", R.USER_UNKNOWN),  # bad destination mailbox address
        Rule("X.1.2", R.DOMAIN_NOT_FOUND),  # bad destination system address
        Rule("X.1.3", R.USER_UNKNOWN),  # bad destination mailbox address syntax
        Rule("X.1.4", R.USER_UNKNOWN),  # destination mailbox address ambiguous
        Rule("X.1.5", R.OTHER),  # destination address valid: not a failure of the address
        Rule("X.1.6", R.USER_UNKNOWN),  # destination mailbox has moved, no forwarding address
        Rule("X.1.7", R.POLICY),  # the sender's mailbox address syntax
        Rule("X.1.8", R.POLICY),  # the sender's system address
        Rule("X.1.10", R.USER_UNKNOWN, "not found"),  # Microsoft: "Recipient not found by SMTP address lookup"
        Rule("X.1.10", R.DOMAIN_NOT_FOUND),  # RFC 7505: the recipient's domain has a null MX
        Rule("X.2.1", R.MAILBOX_DISABLED),  # mailbox disabled, not accepting messages
        Rule("X.2.2", R.MAILBOX_FULL),
        Rule("X.2.3", R.CONTENT_REJECTED),  # message length exceeds administrative limit
        Rule("X.3.4", R.CONTENT_REJECTED),  # message too big for system
        Rule("X.3.1", R.MAILBOX_FULL),  # mail system full
        Rule("5.4.1", R.USER_UNKNOWN, "access denied"),  # Microsoft's directory-based edge blocking
        Rule("X.4.1", R.HOST_UNREACHABLE),  # no answer from host
        Rule("X.4.2", R.HOST_UNREACHABLE),  # bad connection
        Rule("X.4.3", R.HOST_UNREACHABLE),  # directory server failure (DNS)
        Rule("5.4.4", R.DOMAIN_NOT_FOUND),  # unable to route, for good: no MX nor address
        Rule("4.4.4", R.HOST_UNREACHABLE),
        Rule("X.4.5", R.RATE_LIMITED),  # mail system congestion
        Rule("X.4.7", R.EXPIRED),  # delivery time expired
        Rule("X.5.3", R.RATE_LIMITED),  # too many recipients
        Rule("X.6", R.CONTENT_REJECTED),  # media and content
        Rule("X.7.7", R.CONTENT_REJECTED),  # message integrity failure
        Rule("X.7.1", R.POLICY, "relay"),  # relaying denied: the sender's configuration
        Rule("X.7.0", R.POLICY, "tls"),
        Rule("X.7.1", R.BLOCKED, "blocked"),
        Rule("X.7", R.POLICY),  # the rest of security and policy: delivery not authorized, TLS required
    )


STATUSES = _statuses()

# 3. Words for what a status does not say, or where there is none; a block first, so that a text naming
# both a block and a mailbox never suppresses.
WORDS: tuple[Rule, ...] = (
    *_words(R.BLOCKED, "blocked", "banned", "no smtp service"),
    *_words(R.MAILBOX_DISABLED, "disabled", "deactivated", "inactive", "suspended", "account closed"),
    *_words(R.MAILBOX_DISABLED, "discontinued", "no longer active", "has been terminated", "account expired"),
    *_words(R.MAILBOX_DISABLED, "account locked", "account is locked", "mailbox closed", "not active"),
    *_words(R.MAILBOX_FULL, "mailbox full", "mailbox is full", "over quota", "quota exceeded", "exceeded storage"),
    *_words(R.MAILBOX_FULL, "storage space", "insufficient storage", "mailbox size limit", "too many mails"),
    *_words(R.MAILBOX_FULL, "exceed the quota", "over its quota", "full mailbox", "exceeds quota", "mail quota"),
    *_words(R.MAILBOX_FULL, "mailbox quota", "mailbox exceeded", "mail box full", "mailfolder is full", "quota"),
    *_words(R.MAILBOX_FULL, "insufficient disk space", "not enough space"),
    *_words(R.DOMAIN_NOT_FOUND, "host not found", "domain not found", "no such domain", "unknown domain"),
    *_words(R.DOMAIN_NOT_FOUND, "nxdomain", "unrouteable domain", "host unknown", "name or service not known"),
    *_words(R.DOMAIN_NOT_FOUND, "no mx", "domain does not exist", "dns lookup failed"),
    *_words(R.DOMAIN_NOT_FOUND, "does not accept mail", "null mx", "domain is not valid", "invalid domain"),
    *_words(R.DOMAIN_NOT_FOUND, "accepts no mail", "does not accept any mail", "not accepting any mail"),
    # qmail ("Sorry, I couldn't find any host named …"), Exim ("Unrouteable mail domain", "all relevant MX
    # records point to non-existent hosts"), Sendmail ("Host unknown").
    *_words(R.DOMAIN_NOT_FOUND, "couldn't find any host", "unrouteable mail domain", "non-existent host"),
    *_words(R.DOMAIN_NOT_FOUND, "no such host", "unknown host", "domain name not found"),
    *_words(R.USER_UNKNOWN, "user unknown", "unknown user", "no such user", "no such mailbox", "unknown recipient"),
    *_words(R.USER_UNKNOWN, "does not exist", "doesn't exist", "not exist", "invalid recipient", "invalid mailbox"),
    *_words(R.USER_UNKNOWN, "recipient not found", "user not found", "mailbox not found", "address not found"),
    *_words(R.USER_UNKNOWN, "unknown local part", "unrouteable address", "no mailbox", "not a valid mailbox"),
    *_words(R.USER_UNKNOWN, "addressee unknown", "account that you tried to reach", "user is unknown"),
    *_words(R.USER_UNKNOWN, "doesn't have a", "no such recipient", "bad address", "invalid address"),
    *_words(R.USER_UNKNOWN, "mailbox unavailable", "mailbox not available", "unknown address", "not our customer"),
    *_words(R.USER_UNKNOWN, "recipient rejected", "address rejected", "user doesn't", "no valid recipients"),
    # qmail ("Sorry, no mailbox here by that name"), Lotus Domino ("not listed in Domino Directory"),
    # Exchange ("The email address you entered couldn't be found", RESOLVER.ADR.RecipNotFound), Sendmail.
    *_words(R.USER_UNKNOWN, "no mailbox here", "not listed in", "couldn't be found", "could not be found"),
    *_words(R.USER_UNKNOWN, "recipnotfound", "recipient unknown", "no such address", "unknown or illegal alias"),
    *_words(R.USER_UNKNOWN, "user not known", "invalid user", "unknown mailbox", "mailbox unknown", "no such person"),
    *_words(R.USER_UNKNOWN, "address unknown", "not a valid recipient", "is not a valid user", "undeliverable address"),
    *_words(R.EXPIRED, "expired", "retry timeout", "gave up", "delivery time", "retry time"),
    *_words(R.EXPIRED, "could not be delivered for", "message timeout", "in the queue too long"),
    *_words(R.EXPIRED, "cannot send message for", "too long in queue"),  # qmail, Sendmail
    *_words(R.HOST_UNREACHABLE, "connection refused", "timed out", "no route to host", "network is unreachable"),
    *_words(R.HOST_UNREACHABLE, "unable to connect", "could not connect", "connection reset", "lost connection"),
    *_words(R.HOST_UNREACHABLE, "not reachable", "connect to", "unreachable", "have been failing"),
    *_words(R.HOST_UNREACHABLE, "wasn't able to establish", "unable to establish", "network error"),
    *_words(R.POLICY, "relay", "not permitted", "not allowed", "policy"),
)

# RFC 3463's own descriptions of its codes, which MTAs quote without the code.
RFC3463_WORDS: tuple[Rule, ...] = (
    *_words(R.USER_UNKNOWN, "bad destination mailbox address", "destination mailbox address ambiguous"),
    *_words(R.DOMAIN_NOT_FOUND, "bad destination system address"),
    *_words(R.MAILBOX_FULL, "mail system full", "account is full"),  # Yandex's "Account is full" too
    *_words(R.CONTENT_REJECTED, "message length exceeds", "message too big for system"),
    *_words(R.HOST_UNREACHABLE, "no answer from host", "bad connection", "routing server failure"),
    *_words(R.RATE_LIMITED, "mail system congestion"),
    *_words(R.POLICY, "delivery not authorized"),
)

# 4. RFC 5321's reply codes, last.
CODES = {
    551: R.USER_UNKNOWN,  # user not local
    553: R.USER_UNKNOWN,  # mailbox name not allowed (e.g. syntax incorrect)
    552: R.MAILBOX_FULL,  # exceeded storage allocation
    421: R.HOST_UNREACHABLE,  # service not available, closing transmission channel
}

RULES: tuple[Rule, ...] = (*SENDER_FIRST, *PROVIDERS, *STATUSES, *RFC3463_WORDS, *WORDS)


@dataclass(frozen=True)
class Verdict:
    reason: str  # a RefusalReason; "" for a reply that is no failure
    hard: bool = False
    suppresses: bool = False
    check: str = ""  # AUTHENTICATION: the readiness check id to fix

    @property
    def cause(self) -> str:
        """The compatibility cause (messaging/models ReplyCause) of the reason; "" for no failure."""
        return CAUSE_OF[RefusalReason(self.reason)].value if self.reason else ""

    @property
    def bounce_type(self) -> str:
        return ("hard" if self.hard else "soft") if self.reason else ""

    def note(self, domain: str) -> str:
        """The explanation for an event's detail, e.g.
        " (reason: authentication — fix the dmarc check: manage.py check_readiness acme.test)"."""
        if self.reason in ("", R.OTHER):
            return ""  # "other" explains nothing the reply does not say: the field alone records it
        if not self.check:
            return f" (reason: {self.reason})"
        return f" (reason: {self.reason} — fix the {self.check} check: manage.py check_readiness {domain})"


NO_FAILURE = Verdict("")


def classify_refusal(
    code: int | None,
    enhanced_status: str,
    text: str,
    speaker: Speaker = Speaker.RECEIVER,
    *,
    gave_up: bool = False,
) -> Verdict:
    """The verdict on a failure reply: its SMTP `code` (None when a report gives only the enhanced
    status), `enhanced_status` ("5.7.26" or ""), its `text` (a reply's, or a report's diagnostic) and who
    said it. `gave_up`: a relay's final failure after transient ones (RFC 3464 `Action: failed` with a
    4.x.x status): a failure no rule explains is `expired`. NO_FAILURE when the reply is no failure (2xx,
    3xx, or neither a code nor a 4.x.x/5.x.x status)."""
    lowered = text[:TEXT_LIMIT].lower()
    status = _specific_status(enhanced_status, lowered)
    failed = code is not None and 400 <= code < 600
    if not failed and (code is not None or not status):
        return NO_FAILURE
    rule = next((rule for rule in RULES if rule.matches(status, lowered)), None)
    if rule is not None:
        reason, check = rule.reason, rule.check
    else:
        reason, check = CODES.get(code or 0, R.OTHER), ""
    if gave_up and reason == R.OTHER:
        reason = R.EXPIRED
    permanent = (status or str(code or "")).startswith("5")
    hard = permanent and reason not in ALWAYS_SOFT
    suppresses = hard and reason in SUPPRESSING and speaker != Speaker.SERVICE
    return Verdict(reason.value, hard, suppresses, check)


def _specific_status(enhanced_status: str, text: str) -> str:
    """The failure status to read: the one given, unless it is the generic X.0.0 (a DSN's "Status: 5.0.0"
    over a "Diagnostic-Code: smtp; 550 5.7.606 ...") and the text names a more specific one."""
    status = enhanced_status if STATUS.fullmatch(enhanced_status) else ""
    if status and not status.endswith(".0.0"):
        return status
    named = STATUS_IN_TEXT.search(text)
    return named.group() if named and not named.group().endswith(".0.0") else status

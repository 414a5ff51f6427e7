"""Whether a complaint comes from a feedback loop the operator trusts (issue 41): anyone who received one
of a domain's messages can send an ARF about it, so only a mailbox provider's report may count toward the
complaint-rate safeguard (messaging/safeguards.py).

A complaint is trusted when its mail carries a DKIM signature that verifies (dkimpy, the key looked up
through the service's resolver, domains.dns.dns_resolver) for a domain in MAILSERVICE_FBL_DOMAINS or a
subdomain of one (Yahoo signs d=arf.mail.yahoo.com), or when its envelope sender is one of
MAILSERVICE_FBL_ADDRESSES. Signatures of other domains are not even checked: a valid signature of
attacker.example proves nothing. Verification reads the message once to hash it and makes one TXT
lookup per candidate signature, bounded by MAILSERVICE_DNS_TIMEOUT; a failure of either is "not trusted".
"""

import logging
from dataclasses import dataclass

import dkim
from django.conf import settings

from domains.dns import dkim_key_txt

logger = logging.getLogger(__name__)
# A report carries one or two signatures; more are not checked (each costs a DNS lookup and a hash).
MAX_SIGNATURES = 3


@dataclass(frozen=True)
class FeedbackLoopTrust:
    trusted: bool
    why: str  # for the complaint's event: which loop, or why none


def _trusted_domain(domain: str) -> bool:
    domain = domain.lower().rstrip(".")
    return any(domain == listed or domain.endswith(f".{listed}") for listed in settings.MAILSERVICE_FBL_DOMAINS)


def _signing_domains(signatures: list[bytes]) -> list[str]:
    """The d= of each DKIM-Signature field's value, in order ("" where it has none)."""
    found = []
    for value in signatures:
        tags = dict(tag.strip().partition(b"=")[::2] for tag in value.split(b";") if b"=" in tag)
        found.append(b"".join(tags.get(b"d", b"").split()).decode("ascii", "replace"))
    return found


def feedback_loop_trust(*, raw: bytes, envelope_from: str) -> FeedbackLoopTrust:
    """Whether the complaint in `raw`, received from `envelope_from`, comes from a trusted feedback loop."""
    if envelope_from.lower() in settings.MAILSERVICE_FBL_ADDRESSES:
        return FeedbackLoopTrust(True, f"from {envelope_from}, a feedback loop address the operator lists")
    try:
        verifier = dkim.DKIM(raw)
        signatures = [value for name, value in verifier.headers if name.lower() == b"dkim-signature"]
    except dkim.DKIMException:
        return FeedbackLoopTrust(False, "unauthenticated: its headers cannot be read")
    for index, domain in enumerate(_signing_domains(signatures)[:MAX_SIGNATURES]):
        if not _trusted_domain(domain):
            continue
        try:
            if verifier.verify(idx=index, dnsfunc=dkim_key_txt):
                return FeedbackLoopTrust(True, f"DKIM-signed by {domain}, a trusted feedback loop")
        except dkim.DKIMException as exc:
            logger.info("complaint signed by %s does not verify: %s", domain, exc)
    return FeedbackLoopTrust(False, "unauthenticated: no valid DKIM signature of a trusted feedback loop")

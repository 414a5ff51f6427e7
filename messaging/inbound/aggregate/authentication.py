"""Whether a report mail comes from the organisation it names: DKIM- or SPF-aligned (RFC 7489 §3.1,
relaxed) with the domain of the report's `email`.

The inbound server authenticates nothing else (it stores mail as received), so a report mail is checked
here, off the SMTP session: each DKIM signature verified with dkimpy, SPF evaluated with pyspf for the
connecting address, MAIL FROM and HELO the server recorded, every lookup through the service's
resolver with MAILSERVICE_DNS_TIMEOUT. Anyone can mail a report naming any reporter; only an
authenticated one is counted by default (messaging/inbound/aggregate/selectors.py, dmarc_summary).
"""

import logging

import dkim
import spf
from django.conf import settings

from domains.dns import dkim_key_txt
from messaging.readiness.dns_checks import organisational_domain

logger = logging.getLogger(__name__)

MAX_SIGNATURES = 5  # DKIM signatures verified per mail: each costs a lookup and an RSA verification
SPF_EVALUATION_SECONDS = 10.0


def _dkim_aligned(raw: bytes, reporter: str) -> bool:
    verifier = dkim.DKIM(raw, timeout=int(settings.MAILSERVICE_DNS_TIMEOUT) or 1)
    signatures = [name for name, _ in verifier.headers if name.lower() == b"dkim-signature"]
    for index in range(min(len(signatures), MAX_SIGNATURES)):
        try:
            verified = verifier.verify(idx=index, dnsfunc=dkim_key_txt)
        except dkim.DKIMException:
            continue
        signer = (verifier.domain or b"").decode("ascii", "replace")
        if verified and organisational_domain(signer) == reporter:
            return True
    return False


def _spf_aligned(*, peer_ip: str, envelope_from: str, helo: str, reporter: str) -> bool:
    sender_domain = envelope_from.rpartition("@")[2]
    if not peer_ip or not sender_domain or organisational_domain(sender_domain) != reporter:
        return False
    query = spf.query(
        i=peer_ip,
        s=envelope_from,
        h=helo or sender_domain,
        timeout=settings.MAILSERVICE_DNS_TIMEOUT,
        querytime=SPF_EVALUATION_SECONDS,
    )
    result, _code, _explanation = query.check()
    return bool(result == "pass")


def report_authenticated(*, raw: bytes, reporter_domain: str, peer_ip: str, envelope_from: str, helo: str) -> bool:
    """True when the mail is DKIM- or SPF-aligned with `reporter_domain` (the report's email domain)."""
    if not reporter_domain:
        return False
    reporter = organisational_domain(reporter_domain)
    try:
        return _dkim_aligned(raw, reporter) or _spf_aligned(
            peer_ip=peer_ip, envelope_from=envelope_from, helo=helo, reporter=reporter
        )
    except Exception:  # noqa: BLE001 - hostile mail may break either library; it is then not authenticated
        logger.warning("inbound: a report from <%s> could not be authenticated", envelope_from, exc_info=True)
        return False

import base64
import re
from datetime import date, datetime, timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.db.models import F
from django.utils import timezone

from domains.models import DailyUsage, Domain, SendingControl
from mailservice.errors import ErrorCode, TooManyRequests, ValidationFailed

_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def normalize_domain_name(name: str) -> str:
    """Lower-case, IDNA-encoded, no trailing dot; raises ValidationFailed if it is not a hostname."""
    candidate = name.strip().rstrip(".").lower()
    try:
        candidate = candidate.encode("idna").decode("ascii")
    except UnicodeError:
        raise ValidationFailed(f"{name!r} is not a valid domain name") from None
    labels = candidate.split(".")
    if len(candidate) > 253 or len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        raise ValidationFailed(f"{name!r} is not a valid domain name")
    return candidate


def dkim_key_pair() -> tuple[str, str]:
    """A fresh RSA-2048 key: (private key PEM, public key as base64 DER for the p= tag)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    public_der = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, base64.b64encode(public_der).decode()


def domain_create(*, name: str, verified: bool = False, actor: str = "") -> Domain:
    normalized = normalize_domain_name(name)
    if Domain.objects.filter(name=normalized).exists():
        raise ValidationFailed(f"Domain {normalized} already exists")
    private_pem, public_b64 = dkim_key_pair()
    domain = Domain(name=normalized, dkim_private_key=private_pem, dkim_public_key=public_b64)
    if verified:
        domain.verified, domain.verified_at, domain.verified_by = True, timezone.now(), actor or "operator"
    domain.save()
    return domain


def domain_mark_verified(*, domain: Domain, actor: str) -> Domain:
    domain.verified, domain.verified_at, domain.verified_by = True, timezone.now(), actor
    domain.save(update_fields=["verified", "verified_at", "verified_by", "updated_at"])
    return domain


def sending_control() -> SendingControl:
    control, _ = SendingControl.objects.get_or_create(pk=1)
    return control


def sending_pause(*, domain: Domain | None, actor: str, reason: str = "", automatic: bool = False) -> None:
    """Pause one domain, or (domain=None) the whole service."""
    target: Domain | SendingControl = domain if domain is not None else sending_control()
    fields = {"paused_at": timezone.now(), "paused_by": actor, "pause_reason": reason}
    if isinstance(target, Domain):
        fields |= {"sending_paused": True, "auto_paused": automatic}
    else:
        fields |= {"paused": True}
    for attr, value in fields.items():
        setattr(target, attr, value)
    target.save(update_fields=[*fields, "updated_at"])


def sending_resume(*, domain: Domain | None) -> None:
    if domain is None:
        SendingControl.objects.update_or_create(pk=1, defaults={"paused": False, "pause_reason": ""})
        return
    domain.sending_paused, domain.auto_paused, domain.pause_reason = False, False, ""
    domain.save(update_fields=["sending_paused", "auto_paused", "pause_reason", "updated_at"])


def domain_set_allowance(*, domain: Domain, allowance: int | None) -> Domain:
    if allowance is not None and allowance < 0:
        raise ValidationFailed("The allowance must be zero or more, or unlimited")
    domain.daily_allowance = allowance
    domain.save(update_fields=["daily_allowance", "updated_at"])
    return domain


def domain_set_dispatch_weight(*, domain: Domain, weight: int) -> Domain:
    if not 1 <= weight <= 100:
        raise ValidationFailed("The dispatch weight must be from 1 to 100")
    domain.dispatch_weight = weight
    domain.save(update_fields=["dispatch_weight", "updated_at"])
    return domain


def _seconds_until_next_utc_day(now: datetime) -> int:
    tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return int((tomorrow - now).total_seconds()) + 1


def allowance_exhausted(*, domain: Domain, now: datetime) -> TooManyRequests:
    """The 429 of a send past the domain's daily allowance."""
    return TooManyRequests(
        f"The daily sending allowance of {domain.daily_allowance} messages for {domain.name} is used up",
        retry_after=_seconds_until_next_utc_day(now),
        code=ErrorCode.ALLOWANCE_EXHAUSTED,
    )


def allowance_day_open(*, domain: Domain, day: date) -> None:
    """Create the day's counter row (at zero) if it is missing: the counting UPDATE needs a row."""
    DailyUsage.objects.get_or_create(domain=domain, day=day)


def allowance_consume(*, domain: Domain) -> None:
    """Count one send against today's allowance, or raise 429 when it is used up.

    A conditional UPDATE on the day's counter row, so concurrent sends cannot overshoot.
    Call inside the transaction that stores the message, so a rolled-back send costs nothing.
    The UPDATE is tried first: it is the only query on every send but the day's first (the
    accept benchmark counts database round trips; a get_or_create first made it two).
    On PostgreSQL, message_send counts with the same conditional UPDATE inside its one statement.
    """
    now = timezone.now()
    counter = DailyUsage.objects.filter(domain=domain, day=now.date())
    if domain.daily_allowance is not None:
        counter = counter.filter(sent_count__lt=domain.daily_allowance)
    if counter.update(sent_count=F("sent_count") + 1) == 1:
        return
    allowance_day_open(domain=domain, day=now.date())
    if counter.update(sent_count=F("sent_count") + 1) == 0:
        raise allowance_exhausted(domain=domain, now=now)

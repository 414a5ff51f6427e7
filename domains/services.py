import base64
from datetime import date, datetime, timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from domains.models import DailyUsage, DkimKey, DkimKeyState, Domain, SendingControl, SourcePool
from mailservice.doorbell import wake_dispatchers
from mailservice.encryption import encrypt_secret
from mailservice.errors import ErrorCode, TooManyRequests, ValidationFailed
from mailservice.mailbox import InvalidAddress, canonical_domain

# The selector of the key a domain is created with (the one domains had before rotation existed).
FIRST_DKIM_SELECTOR = "mail"


def normalize_domain_name(name: str) -> str:
    """`mailservice.mailbox.canonical_domain` (UTS 46 / IDNA 2008 A-labels), as an API error."""
    try:
        return canonical_domain(name, trailing_dot=True)
    except InvalidAddress as exc:
        raise ValidationFailed(str(exc)) from None


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
    domain = Domain(name=normalized)
    if verified:
        domain.verified, domain.verified_at, domain.verified_by = True, timezone.now(), actor or "operator"
    with transaction.atomic():
        domain.save()
        # A new domain's first key signs at once: nothing has been sent under its name yet, and
        # its record is published along with the others before the domain is verified.
        dkim_key_create(domain=domain, selector=FIRST_DKIM_SELECTOR, state=DkimKeyState.ACTIVE)
    return domain


def dkim_key_create(*, domain: Domain, selector: str, state: DkimKeyState) -> DkimKey:
    private_pem, public_b64 = dkim_key_pair()
    now = timezone.now()
    return DkimKey.objects.create(
        domain=domain,
        selector=selector,
        state=state,
        private_key=encrypt_secret(private_pem),
        public_key=public_b64,
        activated_at=now if state == DkimKeyState.ACTIVE else None,
    )


def _next_selector(*, domain: Domain, now: datetime) -> str:
    """`msYYYYMMDD`, with -2, -3… on a second rotation the same day: dated, so never a recent one reused."""
    taken = set(domain.dkim_keys.values_list("selector", flat=True))
    base = f"ms{now:%Y%m%d}"
    return next(
        selector for selector in [base, *(f"{base}-{n}" for n in range(2, len(taken) + 3))] if selector not in taken
    )


def dkim_rotate(*, domain: Domain) -> DkimKey:
    """A new pending key under a new selector; it signs only once its DNS record is found or an operator forces it."""
    pending = domain.dkim_keys.filter(state=DkimKeyState.PENDING).first()
    if pending is not None:
        raise ValidationFailed(
            f"{domain.name} already has a pending DKIM key (selector {pending.selector}):"
            " publish its record and check DNS, or force it"
        )
    return dkim_key_create(
        domain=domain, selector=_next_selector(domain=domain, now=timezone.now()), state=DkimKeyState.PENDING
    )


def dkim_activate(*, key: DkimKey, found_in_dns: bool, actor: str) -> DkimKey:
    """Make a pending key the one that signs; the active key retires (its record must stay published
    for MAILSERVICE_DKIM_RETIRE_DAYS). `found_in_dns` False is an operator's override, recorded as such."""
    now = timezone.now()
    with transaction.atomic():
        # The domain row serialises concurrent switches (a DNS check and a forced switch at once).
        Domain.objects.select_for_update().filter(pk=key.domain_id).first()
        pending = DkimKey.objects.filter(pk=key.pk, state=DkimKeyState.PENDING)
        if not pending.exists():
            raise ValidationFailed(f"The DKIM key {key.selector} is not pending any more")
        DkimKey.objects.filter(domain_id=key.domain_id, state=DkimKeyState.ACTIVE).update(
            state=DkimKeyState.RETIRING,
            retire_after=now + timedelta(days=settings.MAILSERVICE_DKIM_RETIRE_DAYS),
            updated_at=now,
        )
        proof = {"verified_at": now} if found_in_dns else {"forced_by": actor, "forced_at": now}
        pending.update(state=DkimKeyState.ACTIVE, activated_at=now, updated_at=now, **proof)
    key.refresh_from_db()
    return key


def dkim_retire_expired(*, now: datetime) -> int:
    """Delete retiring keys whose grace period is over; returns how many."""
    deleted, _ = DkimKey.objects.filter(state=DkimKeyState.RETIRING, retire_after__lte=now).delete()
    return deleted


def domain_mark_verified(*, domain: Domain, actor: str) -> Domain:
    domain.verified, domain.verified_at, domain.verified_by = True, timezone.now(), actor
    domain.save(update_fields=["verified", "verified_at", "verified_by", "updated_at"])
    return domain


def sending_pause(*, domain: Domain | None, actor: str, reason: str = "", automatic: bool = False) -> None:
    """Pause one domain (by an operator, or `automatic`ally by the safeguard), or (None) every domain."""
    stamp = {"paused_at": timezone.now(), "paused_by": actor, "pause_reason": reason}
    if domain is None:
        SendingControl.objects.update_or_create(pk=1, defaults={"paused": True, **stamp})
        return
    for attr, value in {"sending_paused": True, "auto_paused": automatic, **stamp}.items():
        setattr(domain, attr, value)
    domain.save(update_fields=["sending_paused", "auto_paused", *stamp, "updated_at"])


def sending_resume(*, domain: Domain | None) -> None:
    """Lift the pause of one domain (an operator's or the safeguard's), or (None) the global one;
    the workers' dispatch loops are woken at commit to send what the pause held."""
    if domain is None:
        SendingControl.objects.update_or_create(pk=1, defaults={"paused": False, "pause_reason": ""})
    else:
        domain.sending_paused, domain.auto_paused, domain.pause_reason = False, False, ""
        domain.save(update_fields=["sending_paused", "auto_paused", "pause_reason", "updated_at"])
    wake_dispatchers()


def domain_set_allowance(*, domain: Domain, allowance: int | None) -> Domain:
    if allowance is not None and allowance < 0:
        raise ValidationFailed("The allowance must be zero or more, or unlimited")
    domain.daily_allowance = allowance
    domain.save(update_fields=["daily_allowance", "updated_at"])
    return domain


def domain_set_retention(*, domain: Domain, days: int | None) -> Domain:
    """Keep the domain's messages `days` days (None: MAILSERVICE_RETENTION_DAYS); the next purge applies it."""
    if days is not None and days < 1:
        raise ValidationFailed("Messages must be kept at least one day, or empty for the default")
    domain.retention_days = days
    domain.save(update_fields=["retention_days", "updated_at"])
    return domain


def domain_set_dispatch_weight(*, domain: Domain, weight: int) -> Domain:
    if not 1 <= weight <= 100:
        raise ValidationFailed("The dispatch weight must be from 1 to 100")
    domain.dispatch_weight = weight
    domain.save(update_fields=["dispatch_weight", "updated_at"])
    return domain


def domain_set_source_pool(*, domain: Domain, pool: SourcePool | None) -> Domain:
    """Direct delivery leaves for `domain` from the addresses of `pool` (None: every source address)."""
    domain.source_pool = pool
    domain.save(update_fields=["source_pool", "updated_at"])
    return domain


def source_pool_save(*, pool: SourcePool, addresses: list[str]) -> SourcePool:
    """Save `pool` with `addresses`, each one of MAILSERVICE_SOURCE_ADDRESSES (kept in their order there)."""
    configured = list(settings.MAILSERVICE_SOURCE_ADDRESSES)
    unknown = sorted(set(addresses) - set(configured))
    if unknown:
        raise ValidationFailed(f"Not in MAILSERVICE_SOURCE_ADDRESSES: {', '.join(unknown)}")
    pool.addresses = [address for address in configured if address in set(addresses)]
    pool.save()
    return pool


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


def allowance_consume(*, domain: Domain, count: int = 1) -> None:
    """Count `count` sends (a batch's: all or none) against today's allowance, or raise 429 when they do not fit.

    A conditional UPDATE on the day's counter row, so concurrent sends cannot overshoot.
    Call inside the transaction that stores the message, so a rolled-back send costs nothing.
    The UPDATE is tried first: it is the only query on every send but the day's first (the
    accept benchmark counts database round trips; a get_or_create first made it two).
    On PostgreSQL, message_send counts with the same conditional UPDATE inside its one statement.
    """
    now = timezone.now()
    counter = DailyUsage.objects.filter(domain=domain, day=now.date())
    if domain.daily_allowance is not None:
        counter = counter.filter(sent_count__lte=domain.daily_allowance - count)
    if counter.update(sent_count=F("sent_count") + count) == 1:
        return
    allowance_day_open(domain=domain, day=now.date())
    if counter.update(sent_count=F("sent_count") + count) == 0:
        raise allowance_exhausted(domain=domain, now=now)

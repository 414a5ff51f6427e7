"""Signed, expiring links to a received message's raw source and attachments (sent in
`email.received`). The link alone is not enough: the API still wants a key of the domain."""

import time

from django.conf import settings
from django.core import signing

from mailservice.errors import ApiError, ErrorCode

_SALT = "webhooks.links"
# Clocks of the web hosts may disagree by this much; a token dated further ahead was not made here
# (Django's max_age check alone takes a future date as a young token).
CLOCK_SKEW_SECONDS = 60


def link_sign(path: str) -> str:
    """The absolute link (MAILSERVICE_API_URL + path) carrying a token good for MAILSERVICE_WEBHOOK_LINK_MAX_AGE."""
    token = signing.TimestampSigner(salt=_SALT).sign(path)[len(path) + 1 :]
    return f"{(settings.MAILSERVICE_API_URL or '').rstrip('/')}{path}?token={token}"


def link_check(*, path: str, token: str | None) -> None:
    """Raise unless `token` was made by link_sign for `path`, has not expired and is not dated ahead."""
    try:
        signing.TimestampSigner(salt=_SALT).unsign(
            f"{path}:{token or ''}", max_age=settings.MAILSERVICE_WEBHOOK_LINK_MAX_AGE
        )
    except signing.SignatureExpired:
        raise ApiError("token: this link has expired", code=ErrorCode.FORBIDDEN) from None
    except signing.BadSignature:
        raise ApiError("token: missing or invalid link token", code=ErrorCode.FORBIDDEN) from None
    # The signature holds, so the token is `timestamp:signature` as link_sign made it.
    if signing.b62_decode((token or "").partition(":")[0]) > time.time() + CLOCK_SKEW_SECONDS:
        raise ApiError("token: this link is dated in the future", code=ErrorCode.FORBIDDEN)

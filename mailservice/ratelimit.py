"""The per-client-IP request limit (MAILSERVICE_RATE_LIMIT), one counter for every way in.

The HTTP API counts each request, the submission SMTP server each AUTH attempt and each message,
on the same counter in the cache (shared across processes through Redis), so a client cannot
get twice the budget by switching protocols.
"""

import logging

from django.conf import settings
from django.http import HttpRequest
from django_ratelimit.core import get_usage

logger = logging.getLogger(__name__)

_GROUP = "api"


def client_key(_group: str, request: HttpRequest) -> str:
    """django-ratelimit's key: the client IP the caller put in REMOTE_ADDR."""
    return request.META["REMOTE_ADDR"]


def request_counted(*, ip: str) -> int | None:
    """Count one request from `ip`; the seconds to wait when it is over the limit, else None.

    A cache outage lets the request through (logged): it must not take the service down with it.
    """
    request = HttpRequest()
    request.META["REMOTE_ADDR"] = ip
    try:
        usage = get_usage(request, group=_GROUP, key=client_key, rate=settings.MAILSERVICE_RATE_LIMIT, increment=True)
    except Exception:  # noqa: BLE001 - see the docstring
        logger.warning("rate limit counter unavailable; request let through", exc_info=True)
        return None
    if usage is None or not usage["should_limit"]:
        return None
    return max(1, int(usage["time_left"]))

"""Keyset cursors of the API's lists: the last item's position, signed, bound to the domain and side of
the key that listed it and to the filters it was made with (GET /v1/messages' own cursor is
messaging/selectors.py's, older and kept as it is for the clients that hold one)."""

from datetime import datetime
from typing import Any

from django.core import signing

from mailservice.errors import ErrorCode, ValidationFailed

_INVALID = "after: invalid cursor"


def cursor_encode(*, salt: str, owner: str, filters: str, moment: datetime, key: Any) -> str:
    position = {"o": owner, "f": filters, "t": moment.isoformat(), "k": key}
    return signing.dumps(position, salt=salt, compress=False)


def cursor_decode(*, salt: str, cursor: str, owner: str, filters: str) -> tuple[datetime, Any]:
    """(created_at, tie-breaker) of a cursor made by cursor_encode for `owner` with the same `filters`."""
    try:
        position = signing.loads(cursor, salt=salt)
        made_for, made_with, moment = position["o"], position["f"], datetime.fromisoformat(position["t"])
        key = position["k"]
    except (signing.BadSignature, KeyError, TypeError, ValueError):
        raise ValidationFailed(_INVALID, code=ErrorCode.INVALID_CURSOR) from None
    if made_for != owner:
        raise ValidationFailed(_INVALID, code=ErrorCode.INVALID_CURSOR)  # another key's side looks forged
    if made_with != filters:
        raise ValidationFailed(
            "after: this cursor was made with other filters; repeat them to continue", code=ErrorCode.INVALID_CURSOR
        )
    return moment, key

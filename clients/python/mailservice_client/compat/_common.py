"""What the four compatibility styles share: field screening, list splitting and error renaming."""

import re
from collections.abc import Iterable, Mapping
from typing import Any

from mailservice_client._validate import check_send
from mailservice_client.errors import ValidationError

# The whitespace of Python's `\s` (what the server's grammar uses), spelled out so the JS client matches.
_SPACE = "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_EDGE_SPACE = re.compile(f"^[{_SPACE}]+|[{_SPACE}]+$")


def screen(
    params: Mapping[str, Any], *, allowed: Iterable[str], unsupported: Iterable[str], prefix: str = ""
) -> dict[str, Any]:
    """The params without None values; a named unsupported option or any unknown field is an error."""
    if not isinstance(params, Mapping):
        raise ValidationError(prefix.rstrip("."), "must be an object (helper objects are not supported)")
    allowed, unsupported = set(allowed), set(unsupported)
    for key in params:
        if key in unsupported:
            raise ValidationError(f"{prefix}{key}", "is not supported by mailservice")
        if key not in allowed:
            raise ValidationError(f"{prefix}{key}", "unknown field")
    return {key: value for key, value in params.items() if value is not None}


def require(params: Mapping[str, Any], key: str, field: str) -> Any:
    if key not in params:
        raise ValidationError(field, "is required")
    return params[key]


def as_list(value: Any) -> Any:
    """A single address becomes a one-item list; anything else is left for the native checks."""
    return [value] if isinstance(value, str) else value


def split_addresses(value: Any, field: str) -> Any:
    """A comma-separated address string as a list (entries trimmed; empty entries are an error)."""
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string of comma-separated addresses")
    entries = [_EDGE_SPACE.sub("", entry) for entry in value.split(",")]
    for index, entry in enumerate(entries):
        if not entry:
            raise ValidationError(f"{field}[{index}]", "empty address in the comma-separated list")
    return entries


def check_length(value: Any, field: str, *, min_length: int = 0, max_length: int) -> None:
    if isinstance(value, str) and not min_length <= len(value) <= max_length:
        raise ValidationError(field, f"must be {min_length} to {max_length} characters (got {len(value)})")


def native_send(body: dict[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """Validate the translated body; errors name the caller's fields (`names`: native -> style)."""
    try:
        return check_send(body)
    except ValidationError as exc:
        head, dot, rest = exc.field.partition(".")
        head, bracket, index = head.partition("[")
        renamed = names.get(head, head) + bracket + index + dot + rest
        raise ValidationError(renamed, exc.reason) from None

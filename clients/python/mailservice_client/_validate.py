"""Local validation of a native /v1/send body, mirroring the server's serializers and limits.

The server (`mailservice/api/serializers.py`, `mailservice/api/fields.py`) stays the authority; these
checks reject the same input before a request is made, naming the offending field.
"""

import math
import re
from collections.abc import Mapping
from typing import Any

from mailservice_client._mailbox import MAX_LENGTH, MIN_LENGTH, address_problem, is_mailbox
from mailservice_client.errors import ValidationError

MAX_RECIPIENTS = 50
MAX_LIST = 50
MAX_REPLY_TO = 10
MAX_TEXT = 100_000
MAX_TEMPLATE_SUBJECT = 1000
MAX_TEMPLATE_ID = 100
MAX_VARIABLES = 50
MAX_VARIABLE_STRING = 2000
MAX_SAFE_INTEGER = 9007199254740991
_TEMPLATE_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9_-]{0,99}\Z")
_VARIABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,49}")
_SURROGATE = re.compile("[\ud800-\udfff]")

_COMMON = ("from", "to", "cc", "bcc", "replyTo")
_INLINE_FIELDS = (*_COMMON, "subject", "text", "html")
_TEMPLATE_FIELDS = (*_COMMON, "template", "subject")


def reject_unknown(data: Mapping[str, Any], allowed: tuple[str, ...], prefix: str = "") -> None:
    for key in data:
        if key not in allowed:
            raise ValidationError(f"{prefix}{key}", "unknown field")


def check_string(value: Any, field: str, *, max_length: int, allow_blank: bool = True) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    if not allow_blank and not value:
        raise ValidationError(field, "may not be blank")
    if "\x00" in value:
        raise ValidationError(field, "null characters are not allowed")
    if _SURROGATE.search(value):
        raise ValidationError(field, "surrogate characters are not allowed")
    if len(value) > max_length:
        raise ValidationError(field, f"must be at most {max_length} characters (got {len(value)})")
    return value


def check_mailbox(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise ValidationError(field, "must be a string")
    if not is_mailbox(value):
        raise ValidationError(
            field,
            f"must be an address like name@example.com or Name <name@example.com> ({MIN_LENGTH} to {MAX_LENGTH} "
            "characters)",
        )
    problem = address_problem(value)
    if problem:
        raise ValidationError(field, problem)
    return value


def check_mailbox_list(value: Any, field: str, *, max_items: int) -> list[str]:
    """One Mailbox or a list of 1..max_items Mailboxes, as a list."""
    if isinstance(value, str):
        return [check_mailbox(value, field)]
    if not isinstance(value, list):
        raise ValidationError(field, "must be an address or a list of addresses")
    if not 1 <= len(value) <= max_items:
        raise ValidationError(field, f"must hold 1 to {max_items} addresses (got {len(value)})")
    return [check_mailbox(item, f"{field}[{index}]") for index, item in enumerate(value)]


def _check_integer(value: Any, field: str, *, minimum: int) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (isinstance(value, float) and not value.is_integer())
    ):
        raise ValidationError(field, "must be an integer")
    if value < minimum:
        raise ValidationError(field, f"must be at least {minimum}")


def _check_variables(value: Any, field: str) -> None:
    if not isinstance(value, dict):
        raise ValidationError(field, "must be an object")
    if len(value) > MAX_VARIABLES:
        raise ValidationError(field, f"may hold at most {MAX_VARIABLES} variables (got {len(value)})")
    for name, item in value.items():
        if not isinstance(name, str) or not _VARIABLE_NAME.fullmatch(name):
            raise ValidationError(
                field,
                f"variable name {str(name)[:60]!r} must start with a letter and hold only letters, digits and _ "
                "(at most 50 characters)",
            )
        if isinstance(item, str):
            check_string(item, f"{field}.{name}", max_length=MAX_VARIABLE_STRING)
        elif isinstance(item, (int, float)) and not isinstance(item, bool):
            if not (math.isfinite(item) and -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER):
                raise ValidationError(f"{field}.{name}", f"must be between -{MAX_SAFE_INTEGER} and {MAX_SAFE_INTEGER}")
        elif not isinstance(item, bool):
            raise ValidationError(f"{field}.{name}", "must be a string, a number or a boolean")


def _check_template(value: Any) -> None:
    if not isinstance(value, dict):
        raise ValidationError("template", "must be an object")
    reject_unknown(value, ("id", "version", "variables"), "template.")
    if "id" not in value:
        raise ValidationError("template.id", "is required")
    template_id = check_string(value["id"], "template.id", max_length=MAX_TEMPLATE_ID, allow_blank=False)
    if not _TEMPLATE_ID.search(template_id):
        raise ValidationError("template.id", "must be a template id or slug (letters, digits, _ and -)")
    if "version" in value:
        _check_integer(value["version"], "template.version", minimum=1)
    if "variables" in value:
        _check_variables(value["variables"], "template.variables")


def check_send(body: Any) -> dict[str, Any]:
    """Validate a native send body (inline or template variant); returns it as a new dict."""
    if not isinstance(body, Mapping):
        raise ValidationError("", "the send request must be an object")
    is_template = "template" in body
    reject_unknown(body, _TEMPLATE_FIELDS if is_template else _INLINE_FIELDS)
    if "from" not in body:
        raise ValidationError("from", "is required")
    check_mailbox(body["from"], "from")
    recipients = 0
    for name in ("to", "cc", "bcc"):
        if name in body:
            recipients += len(check_mailbox_list(body[name], name, max_items=MAX_LIST))
    if "replyTo" in body:
        check_mailbox_list(body["replyTo"], "replyTo", max_items=MAX_REPLY_TO)
    if is_template:
        _check_template(body["template"])
        if "subject" in body:
            check_string(body["subject"], "subject", max_length=MAX_TEMPLATE_SUBJECT)
    else:
        if "subject" not in body:
            raise ValidationError("subject", "is required")
        check_string(body["subject"], "subject", max_length=MAX_TEXT)
        for name in ("text", "html"):
            if name in body:
                check_string(body[name], name, max_length=MAX_TEXT)
        if "text" not in body and "html" not in body:
            raise ValidationError("text", "at least one of text or html is required")
    if recipients == 0:
        raise ValidationError("to", "at least one of to, cc or bcc is required")
    if recipients > MAX_RECIPIENTS:
        raise ValidationError("to", f"at most {MAX_RECIPIENTS} recipients in total across to, cc and bcc")
    return dict(body)

"""Strict JSON fields: no type coercion (DRF would turn 5 into "5"), spec limits, OpenAPI shapes."""

import re
from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from mailservice import mailbox

MAX_SAFE_INTEGER = 9007199254740991
MAX_ADDRESSES = 50  # in one of to, cc and bcc (and in the three together: serializers.MAX_RECIPIENTS)
MAX_REPLY_TO = 10

MAILBOX_SCHEMA = {
    "type": "string",
    "minLength": mailbox.MIN_LENGTH,
    "maxLength": mailbox.MAX_LENGTH,
    "pattern": mailbox.OPENAPI_PATTERN,
}


_SURROGATE = re.compile("[\ud800-\udfff]")


def _prohibit_surrogates(value: str) -> None:
    """DRF's ProhibitSurrogateCharactersValidator, same message and code, at C speed.

    DRF's walks the string in a Python generator: that was over half the cost of a send with a
    100 000-character body (bench/results/before-after-long-bodies.md).
    """
    found = _SURROGATE.search(value)
    if found:
        raise serializers.ValidationError(
            f"Surrogate characters are not allowed: U+{ord(found.group()):X}.", code="surrogate_characters_not_allowed"
        )


class StrictCharField(serializers.CharField):
    """A JSON string, taken as is (no trimming); NUL (by DRF) and lone surrogates are rejected."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)
        self.validators = [
            _prohibit_surrogates if isinstance(validator, ProhibitSurrogateCharactersValidator) else validator
            for validator in self.validators
        ]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise serializers.ValidationError("must be an integer")
        if isinstance(data, float):
            if not data.is_integer():
                raise serializers.ValidationError("must be an integer")
            data = int(data)
        return super().to_internal_value(data)


@extend_schema_field(MAILBOX_SCHEMA)
class MailboxField(serializers.Field):
    # As for every other string: PostgreSQL cannot store NUL, nor UTF-8 encode a lone surrogate.
    default_validators = [ProhibitNullCharactersValidator(), _prohibit_surrogates]

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            raise serializers.ValidationError("must be a string")
        self.run_validators(data)
        if not mailbox.is_mailbox(data):
            raise serializers.ValidationError(
                "must be an address like name@example.com or Name <name@example.com> (3 to 320 characters)"
            )
        try:
            mailbox.parse_address(data)
        except mailbox.InvalidAddress as exc:
            raise serializers.ValidationError(str(exc)) from None
        return data

    def to_representation(self, value: str) -> str:
        return value


def is_valid_text(value: Any, *, max_length: int) -> bool:
    """Whether StrictCharField(max_length=max_length) takes `value` as is, without building an answer."""
    return isinstance(value, str) and len(value) <= max_length and "\x00" not in value and not _SURROGATE.search(value)


def is_valid_mailbox(value: Any) -> bool:
    """Whether MailboxField takes `value`, without building an answer (the Mailbox grammar refuses NUL)."""
    if not (isinstance(value, str) and mailbox.is_mailbox(value)) or _SURROGATE.search(value):
        return False
    try:
        mailbox.parse_address(value)
    except mailbox.InvalidAddress:
        return False
    return True


# Validating a value keeps no state on the field: one instance serves every item of every list
# (a field per item was a fifth of the validation of a 50-recipient send).
_MAILBOX = MailboxField()


def _mailbox_list(data: Any, *, max_items: int) -> list[str]:
    """One Mailbox or a list of 1..max_items Mailboxes, always returned as a list."""
    if isinstance(data, str):
        return [_MAILBOX.to_internal_value(data)]
    if not isinstance(data, list):
        raise serializers.ValidationError("must be an address or a list of addresses")
    if not 1 <= len(data) <= max_items:
        raise serializers.ValidationError(f"must hold 1 to {max_items} addresses")
    errors: dict[str, Any] = {}
    for index, item in enumerate(data):
        try:
            _MAILBOX.to_internal_value(item)
        except serializers.ValidationError as exc:
            errors[str(index)] = exc.detail
    if errors:
        raise serializers.ValidationError(errors)
    return list(data)


@extend_schema_field(
    {"oneOf": [MAILBOX_SCHEMA, {"type": "array", "items": MAILBOX_SCHEMA, "minItems": 1, "maxItems": MAX_ADDRESSES}]}
)
class AddressOrListField(serializers.Field):
    def to_internal_value(self, data: Any) -> list[str]:
        return _mailbox_list(data, max_items=MAX_ADDRESSES)

    def to_representation(self, value: list[str]) -> list[str]:
        return value


@extend_schema_field(
    {"oneOf": [MAILBOX_SCHEMA, {"type": "array", "items": MAILBOX_SCHEMA, "minItems": 1, "maxItems": MAX_REPLY_TO}]}
)
class ReplyToField(serializers.Field):
    def to_internal_value(self, data: Any) -> list[str]:
        return _mailbox_list(data, max_items=MAX_REPLY_TO)

    def to_representation(self, value: list[str]) -> list[str]:
        return value


VARIABLE_NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9_]{0,49}$"
_VARIABLE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,49}")
VARIABLES_SCHEMA = {
    "type": "object",
    "maxProperties": 50,
    "propertyNames": {"pattern": VARIABLE_NAME_PATTERN},
    "additionalProperties": {
        "oneOf": [
            {"type": "string", "maxLength": 2000},
            {"type": "number", "minimum": -MAX_SAFE_INTEGER, "maximum": MAX_SAFE_INTEGER},
            {"type": "boolean"},
        ]
    },
}


@extend_schema_field(VARIABLES_SCHEMA)
class TemplateVariablesField(serializers.Field):
    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError("must be an object")
        if len(data) > 50:
            raise serializers.ValidationError("may hold at most 50 variables")
        for name, value in data.items():
            if not _VARIABLE_NAME.fullmatch(name):
                raise serializers.ValidationError(
                    f"variable name {name[:60]!r} must start with a letter and hold only letters, digits and _ "
                    "(at most 50 characters)"
                )
            if isinstance(value, str):
                try:
                    StrictCharField(max_length=2000).run_validation(value)
                except serializers.ValidationError as exc:
                    raise serializers.ValidationError({name: exc.detail}) from None
            elif isinstance(value, (int, float)) and not isinstance(value, bool):
                if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
                    raise serializers.ValidationError(
                        {name: f"must be between -{MAX_SAFE_INTEGER} and {MAX_SAFE_INTEGER}"}
                    )
            elif not isinstance(value, bool):
                raise serializers.ValidationError({name: "must be a string, a number or a boolean"})
        return data

    def to_representation(self, value: dict[str, Any]) -> dict[str, Any]:
        return value

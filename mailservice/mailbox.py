"""The spec's Mailbox grammar (section 2.5), in one place.

A Mailbox is 3 to 320 characters: either a bare `local@domain` (no whitespace, `<`, `>`, `@`
or comma on either side, at least one dot in the domain), or a display text without `<`, `>`,
CR or LF, then a space, then such an address in angle brackets. NUL is rejected everywhere.
"""

import re

MIN_LENGTH = 3
MAX_LENGTH = 320

# "Whitespace" is Python's \s (str.isspace), spelled out so that the OpenAPI pattern means the
# same in ECMA-262, whose \s differs (it adds U+FEFF and lacks U+001C-U+001F and U+0085); the
# clients carry the same set. NUL is excluded too: PostgreSQL cannot store it.
_WHITESPACE = r"\t-\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_ATOM = rf"[^\x00{_WHITESPACE}<>@,]"
_DISPLAY = r"[^\x00<>\r\n]+"
_ADDRESS = rf"{_ATOM}+@(?={_ATOM}*\.){_ATOM}+"
_BARE = re.compile(_ADDRESS)
_WITH_DISPLAY = re.compile(rf"(?P<display>{_DISPLAY}) <(?P<address>{_ADDRESS})>")

# The same grammar for the OpenAPI document (ECMA-262 regular expression).
OPENAPI_PATTERN = rf"^(?:{_ADDRESS}|{_DISPLAY} <{_ADDRESS}>)$"


def is_mailbox(value: str) -> bool:
    if not MIN_LENGTH <= len(value) <= MAX_LENGTH:
        return False
    return bool(_BARE.fullmatch(value) or _WITH_DISPLAY.fullmatch(value))


def split_mailbox(value: str) -> tuple[str, str]:
    """(display text, address) of a valid Mailbox; the display text is '' for a bare address."""
    match = _WITH_DISPLAY.fullmatch(value)
    if match:
        return match.group("display"), match.group("address")
    return "", value


def address_of(value: str) -> str:
    return split_mailbox(value)[1]

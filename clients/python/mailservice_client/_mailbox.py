"""The service's Mailbox grammar (spec section 2.5), ported from `mailservice/mailbox.py`.

Kept character for character in step with the server so that local validation accepts and
rejects exactly what the server does; the JS client carries the same grammar.
"""

import re

MIN_LENGTH = 3
MAX_LENGTH = 320

# NUL is refused everywhere, as on the server (PostgreSQL cannot store it).
_ATOM = r"[^\x00\s<>@,]"
_ADDRESS = rf"{_ATOM}+@(?={_ATOM}*\.){_ATOM}+"
_BARE = re.compile(_ADDRESS)
_WITH_DISPLAY = re.compile(rf"(?P<display>[^\x00<>\r\n]+) <(?P<address>{_ADDRESS})>")


def is_mailbox(value: str) -> bool:
    if not MIN_LENGTH <= len(value) <= MAX_LENGTH:
        return False
    return bool(_BARE.fullmatch(value) or _WITH_DISPLAY.fullmatch(value))


def is_bare_address(value: str) -> bool:
    return bool(_BARE.fullmatch(value))

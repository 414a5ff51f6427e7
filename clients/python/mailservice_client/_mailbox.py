"""The service's Mailbox grammar (spec section 2.5), ported from `mailservice/mailbox.py`.

Kept character for character in step with the server so that local validation accepts and
rejects exactly what the server does; the JS client carries the same grammar.
"""

import re
import unicodedata

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


# What the server further requires of the address (mailservice.mailbox.parse_address): a local
# part that SMTP carries as written, and a host name. IDNA 2008 validity of a non-ASCII domain is
# left to the server (it needs the `idna` package); everything else is checked here the same way.
_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_ASCII_DOT_ATOM = re.compile(rf"[{_ATEXT}]+(?:\.[{_ATEXT}]+)*")
_UTF8_DOT_ATOM = re.compile(rf"[\u0080-\U0010ffff{_ATEXT}]+(?:\.[\u0080-\U0010ffff{_ATEXT}]+)*")
_QUOTED_STRING = re.compile(r'"((?:[^"\\]|\\.)+)"')
_QUOTED_PAIR = re.compile(r"\\(.)")
_LDH_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+")
_INVISIBLE = {"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"}


def address_problem(value: str) -> str | None:
    """Why a valid Mailbox cannot be sent as written, or None (the server's rules, same messages)."""
    match = _WITH_DISPLAY.fullmatch(value)
    address = match.group("address") if match else value
    local, _, domain = address.rpartition("@")
    quoted = _QUOTED_STRING.fullmatch(local)
    if quoted:
        content = _QUOTED_PAIR.sub(r"\1", quoted.group(1))
    elif _ASCII_DOT_ATOM.fullmatch(local) or (not local.isascii() and _UTF8_DOT_ATOM.fullmatch(local)):
        content = local
    else:
        return "the part before @ must be a dot-atom or a quoted-string"
    if any(unicodedata.category(char) in _INVISIBLE for char in content):
        return "the part before @ contains an invisible or control character"
    if not content.isascii() and unicodedata.normalize("NFC", content) != content:
        return "the part before @ must be in Unicode normalization form NFC (RFC 6532)"
    literal = domain.startswith("[") and domain.endswith("]")
    if domain.isascii() and not literal and (len(domain) > 253 or not _LDH_HOST.fullmatch(domain.lower())):
        return "the domain is not a valid host name"
    return None

"""The spec's Mailbox grammar (section 2.5), in one place.

A Mailbox is 3 to 320 characters: either a bare `local@domain` (no whitespace, `<`, `>`, `@`
or comma on either side, at least one dot in the domain), or a display text without `<`, `>`,
CR or LF, then a space, then such an address in angle brackets. NUL is rejected everywhere.

The grammar is wider than what SMTP can carry faithfully: `parse_address` reads a valid Mailbox
into the (local part, domain) pair everything downstream uses, or refuses it.
"""

import ipaddress
import re
import unicodedata
from dataclasses import dataclass

import idna

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


# --- The canonical address: parsed once into (local part, domain) ----------------------------

# RFC 5322 3.2.3 atext; RFC 6532 3.2 adds every non-ASCII character (checked separately below).
_ATEXT = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~-"
_ASCII_DOT_ATOM = re.compile(rf"[{_ATEXT}]+(?:\.[{_ATEXT}]+)*")
_UTF8_DOT_ATOM = re.compile(rf"[\u0080-\U0010ffff{_ATEXT}]+(?:\.[\u0080-\U0010ffff{_ATEXT}]+)*")
# RFC 5322 3.2.4 quoted-string without folding white space (the Mailbox grammar has none):
# qtext, or a backslash and the character it quotes. Linear: the two branches never overlap.
_QUOTED_STRING = re.compile(r'"((?:[^"\\]|\\.)+)"')
_QUOTED_PAIR = re.compile(r"\\(.)")
_LDH_HOST = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*")
# Unicode categories no mailbox name is typed with: controls, format characters (soft hyphen,
# zero-width joiners, bidi marks), private use, unassigned. They would make two different
# mailboxes look the same to an operator, so they are refused in a local part.
_INVISIBLE = {"Cc", "Cf", "Co", "Cn", "Cs", "Zl", "Zp"}
MAX_DOMAIN_LENGTH = 253


class InvalidAddress(ValueError):
    """The address cannot be sent faithfully; the message says why (it is shown to the client)."""


def canonical_domain(name: str, *, trailing_dot: bool = False) -> str:
    """A domain name as stored and sent: UTS 46 mapped (lower case, full-width folded, soft
    hyphens dropped), IDNA 2008 A-labels (`straße` -> `xn--strae-oqa`).

    The one normalising function for domain names: commands, console forms, the API's sender
    check, the suppression list and the inbound router all call it. `trailing_dot`: an operator may
    write the root's dot (`example.com.`); an address may not (RFC 5321 4.1.2)."""
    candidate = name.strip()
    candidate = candidate[:-1] if trailing_dot and candidate.endswith(".") else candidate
    if candidate.isascii() and "xn--" not in candidate.lower():
        wire = candidate.lower()  # what UTS 46 does to an ASCII name, without its cost on every send
    else:
        try:
            wire = idna.encode(candidate, uts46=True, transitional=False, std3_rules=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise InvalidAddress(f"{name[:100]!r} is not a valid domain name ({exc})") from None
    if len(wire) > MAX_DOMAIN_LENGTH or "." not in wire or not _LDH_HOST.fullmatch(wire):
        raise InvalidAddress(f"{name[:100]!r} is not a valid domain name")
    return wire


# A name written after an "@" in display text; linear: one character class with nothing after it.
_NAME_AFTER_AT = re.compile(rf"@([^\x00{_WHITESPACE}<>@,;:\"'()\[\]]+)")


def display_domains(value: str) -> list[str]:
    """The canonical domains of the addresses a Mailbox's display text shows (victim.test in
    `"ceo@victim.test" <app@acme.test>`): what a reader takes for the sender. Text after an "@" that
    is no domain name (`@home`) is no address."""
    found = []
    for match in _NAME_AFTER_AT.finditer(split_mailbox(value)[0]):
        try:
            found.append(canonical_domain(match.group(1).rstrip(".")))
        except InvalidAddress:
            continue
    return found


def _address_literal(domain: str) -> str:
    """`[192.0.2.1]` or `[IPv6:2001:db8::1]` (RFC 5321 4.1.3), written in its canonical form."""
    inner = domain[1:-1]
    try:
        if inner[:5].lower() == "ipv6:":
            return f"[IPv6:{ipaddress.IPv6Address(inner[5:]).compressed}]"
        return f"[{ipaddress.IPv4Address(inner)}]"
    except ValueError:
        raise InvalidAddress(f"{domain[:100]!r} is not an IPv4 or IPv6 address literal") from None


@dataclass(frozen=True)
class Address:
    """An addr-spec parsed once: `local` is the local part as its owner names it (a quoted-string's
    content, unquoted), `domain` the canonical domain. Everything written from it (headers, the
    SMTP envelope) and every comparison (suppressions) uses this pair, never the typed text."""

    local: str
    domain: str

    @property
    def smtputf8(self) -> bool:
        """A non-ASCII local part only travels with SMTPUTF8 (RFC 6531); domains are A-labels."""
        return not self.local.isascii()

    def _quoted_local(self) -> str:
        dot_atom = _UTF8_DOT_ATOM if self.smtputf8 else _ASCII_DOT_ATOM
        if dot_atom.fullmatch(self.local):
            return self.local
        return '"' + self.local.replace("\\", "\\\\").replace('"', '\\"') + '"'

    @property
    def wire(self) -> str:
        """The address as RFC 5321 (MAIL FROM / RCPT TO) and RFC 5322 headers write it: the local
        part as a dot-string, else a quoted-string with backslash and double quote escaped."""
        return f"{self._quoted_local()}@{self.domain}"

    @property
    def key(self) -> str:
        """The form suppressions are listed and compared under: NFKC case-folded local part.

        Deliberately wider than the mailbox itself: receiving systems treat local parts
        case-insensitively in practice, and a suppression exists to stop mail, so `Blocked@` and a
        full-width `ｂlocked@` count as the suppressed `blocked@`."""
        return f"{unicodedata.normalize('NFKC', self.local).casefold()}@{self.domain}"

    def __str__(self) -> str:
        return self.wire


def _parse_local(local: str) -> str:
    quoted = _QUOTED_STRING.fullmatch(local)
    if quoted:
        content = _QUOTED_PAIR.sub(r"\1", quoted.group(1))
    elif _ASCII_DOT_ATOM.fullmatch(local) or (not local.isascii() and _UTF8_DOT_ATOM.fullmatch(local)):
        content = local
    else:
        raise InvalidAddress(
            "the part before @ must be a dot-atom (letters, digits and !#$%&'*+/=?^_`{|}~- separated by "
            'single dots) or a quoted-string; comments and unquoted ()<>[]:;\\" are not accepted: write '
            '"a:b"@example.com to send to that local part as written'
        )
    invisible = next((char for char in content if unicodedata.category(char) in _INVISIBLE), None)
    if invisible is not None:
        raise InvalidAddress(f"the part before @ contains an invisible or control character U+{ord(invisible):04X}")
    if not content.isascii() and unicodedata.normalize("NFC", content) != content:
        raise InvalidAddress("the part before @ must be in Unicode normalization form NFC (RFC 6532)")
    return content


def parse_address(value: str) -> Address:
    """The Address of a valid Mailbox (`a@example.org` or `Name <a@example.org>`); InvalidAddress
    when it has no faithful SMTP form. Linear in the input: each regular expression is."""
    local, _, domain = address_of(value).rpartition("@")
    if domain.startswith("[") and domain.endswith("]"):
        return Address(local=_parse_local(local), domain=_address_literal(domain))
    return Address(local=_parse_local(local), domain=canonical_domain(domain))


def comparison_key(value: str) -> str:
    """The form addresses are compared under everywhere (`Address.key`): suppressions, reports, the
    console's recipient outcomes. One with no faithful form (stored before the API refused it, or
    named by a report) is compared lower-cased."""
    try:
        return parse_address(value).key
    except InvalidAddress:
        return value.strip().lower()

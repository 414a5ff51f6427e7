"""Addresses as reports print them: bare recipients of report fields, addresses found in prose, list addresses."""

import re
from email.message import Message as EmailMessage

from messaging.inbound.reports.reading import HEADER_LIMIT
from messaging.rfc5322.parsing import decode_header_value

# An address as bounces print it. Each part is a single character class with a bounded repeat,
# and lines are cut at LINE_LIMIT, so a search costs at most LINE_LIMIT steps per start position.
LOCAL_PART = r"[^\s<>@,;:\"()\[\]'`|=/]{1,64}"  # any UTF-8 (RFC 6531) but no delimiter or path
DOMAIN = r"[A-Za-z0-9][A-Za-z0-9.\-]{0,252}"  # as printed by MTAs: ASCII (IDNA)
ADDRESS = re.compile(f"{LOCAL_PART}@{DOMAIN}")
_UTF8_ESCAPE = re.compile(r"\\x\{([0-9A-Fa-f]{1,6})\}")
_LIST_HEADERS = ("List-Post", "List-Owner", "List-Help", "List-Subscribe", "List-Unsubscribe", "List-Id", "X-BeenThere")


def bare_address(value: str) -> str:
    """'rfc822; <A@Example.org>' -> 'a@example.org'; 'utf-8; zo\\x{EB}@example.org' -> 'zoë@example.org'."""
    address_type, semicolon, address = value.partition(";")
    if not semicolon:
        address = address_type
    elif address_type.strip().lower() in {"utf-8", "unknown"}:
        address = _UTF8_ESCAPE.sub(lambda match: _code_point(match.group(1)), address)
    address = address.strip().strip("<>").strip().strip('"').strip()
    if "<" in address:  # "Name <a@example.org>"
        address = address.rpartition("<")[2].partition(">")[0]
    return address.lower() if "@" in address and " " not in address else ""


def _code_point(hex_digits: str) -> str:
    value = int(hex_digits, 16)
    return chr(value) if value <= 0x10FFFF and not 0xD800 <= value <= 0xDFFF else "\ufffd"


def list_addresses(message: EmailMessage) -> set[str]:
    """Addresses of a mailing list (RFC 2369, RFC 2919): mail to them reaches members, not one failed mailbox."""
    found = set()
    for name in _LIST_HEADERS:
        for value in message.get_all(name, []):
            found |= {address.lower() for address in ADDRESS.findall(decode_header_value(value)[:HEADER_LIMIT])}
    return found

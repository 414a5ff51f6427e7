"""What the corpus tests (tests/inbound/test_sisimai_corpus.py, test_heldout_corpus.py) read in a message
to judge an address a report names: the text it must occur in, and the addresses that did not fail."""

import base64
import re

from messaging.rfc5322.parsing import addresses, parse_bytes, part_text, subparts

_ENCODED_WORD = re.compile(r"=\?utf-8\?b\?([^?]{0,400})\?=", re.IGNORECASE)
# Fields in which a report or the returned message names a recipient that failed (RFC 3464, Exim/Google).
_FAILED_FIELD = re.compile(
    r"^(?:final-recipient|original-recipient|x-failed-recipients)[ \t]*:([^\n]{0,500})", re.I | re.M
)
_LIST_HEADERS = ("List-Post", "List-Owner", "List-Help", "List-Id", "X-Mailing-List", "Mailing-List", "X-BeenThere")
_MAILTO = re.compile(r"[^\s<>:@,;\"]{1,64}@[A-Za-z0-9.\-]{1,253}")


def message_text(raw: bytes) -> str:
    """Everything the message says, raw and decoded: where a right address must occur."""
    message = parse_bytes(raw)
    decoded = " ".join(part_text(part) or "" for part in message.walk() if not part.is_multipart())
    text = raw.decode("utf-8", "replace") + " " + decoded
    # Decoded before lower-casing: base64 is case-sensitive.
    return _ENCODED_WORD.sub(lambda match: base64.b64decode(match.group(1)).decode("utf-8", "replace"), text).lower()


def innocent_addresses(raw: bytes) -> set[str]:
    """Addresses that did not fail: the report's own sender and recipient, the returned message's
    sender, and list addresses; a sender that also is a recipient a failure field or the returned
    message's To/Cc names (someone who mailed themselves) is not innocent, a list address always is."""
    message = parse_bytes(raw)
    returned = [
        subparts(part)[0]
        for part in message.walk()
        if part.get_content_type() in {"message/rfc822", "message/global"} and subparts(part)
    ]
    senders = set(addresses(message, "From", "To", "Reply-To", "Return-Path", "Sender"))
    recipients = {
        value.lower()
        for field in _FAILED_FIELD.findall(raw.decode("utf-8", "replace"))
        for value in _MAILTO.findall(field)
    }
    lists: set[str] = set()
    for original in returned:
        senders |= set(addresses(original, "From", "Reply-To", "Return-Path", "Sender"))
        recipients |= set(addresses(original, "To", "Cc"))
        lists |= {found.lower() for name in _LIST_HEADERS for found in _MAILTO.findall(str(original.get(name, "")))}
    return (senders - recipients) | lists

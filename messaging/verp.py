"""The VERP return path: `bounces+<message public id>.<recipient index>.<tag>@<return-path domain>`.

Each recipient of a message gets its own return path (dispatch sends one SMTP transaction per
recipient), so a bounce reaching it proves which delivery it is about: the recipient at that index
of the message's envelope recipients (`Message.envelope_mailboxes`, each address once), whatever
addresses the bounce names. The tag is a short HMAC of the public id and the index keyed from
SECRET_KEY, so only a party that received that delivery (and so saw its return path) can address a
bounce to it: knowing a Message-ID, which appears in every forwarded copy, is not enough, nor is one
recipient's return path enough to forge another's. Relays may change the case of a local part, so
the tag is lower-case hex and compared case-insensitively.

Two older forms are still accepted for mail already in flight, and prove only the message (so
inbound acts on them only for a message with one recipient):
- the per-message signed form `bounces+<public id>.<tag>` (tag over the public id alone);
- the unsigned form `bounces+<public id>` written before the tag existed, while
  MAILSERVICE_VERP_ACCEPT_UNSIGNED is on, and then only for messages created in the last
  UNSIGNED_GRACE (MTAs stop retrying after five days, RFC 5321 4.5.4.1).
"""

import hmac
from dataclasses import dataclass
from datetime import timedelta

from django.utils.crypto import salted_hmac

VERP_PREFIX = "bounces"
TAG_LENGTH = 10  # hex digits: 40 bits, far beyond guessing at SMTP speed
UNSIGNED_GRACE = timedelta(days=7)
_SALT = "mailservice.verp"
# An index has at most this many digits: far more recipients than a message may have, and the
# local part stays within RFC 5321's 64 octets (`bounces+msg_<29>.<index>.<tag>` is at most 59).
_INDEX_DIGITS = 6


def verp_tag(public_id: str, recipient_index: int | None = None) -> str:
    signed = public_id.lower() if recipient_index is None else f"{public_id.lower()}.{recipient_index}"
    return salted_hmac(_SALT, signed, algorithm="sha256").hexdigest()[:TAG_LENGTH]


def verp_local_part(public_id: str, recipient_index: int | None = None) -> str:
    """The return path's local part: of one recipient (its index), or of the whole message (None)."""
    if recipient_index is None:
        return f"{VERP_PREFIX}+{public_id}.{verp_tag(public_id)}"
    return f"{VERP_PREFIX}+{public_id}.{recipient_index}.{verp_tag(public_id, recipient_index)}"


@dataclass(frozen=True)
class VerpId:
    public_id: str  # "" when the address carries none
    signed: bool  # the tag was present and right
    recipient_index: int | None = None  # the recipient the signed address proves, None for the whole message


def verp_parse(suffix: str) -> VerpId:
    """The part after `bounces+`: `<id>.<index>.<tag>` or `<id>.<tag>` is signed when the tag matches;
    a wrong tag names nothing."""
    rest, dot, tag = suffix.lower().rpartition(".")
    if not dot:
        return VerpId(suffix.lower(), signed=False)
    public_id, index_dot, index = rest.rpartition(".")
    if index_dot and index.isascii() and index.isdigit() and len(index) <= _INDEX_DIGITS and public_id:
        if hmac.compare_digest(tag, verp_tag(public_id, int(index))):
            return VerpId(public_id, signed=True, recipient_index=int(index))
        return VerpId("", signed=False)
    if rest and hmac.compare_digest(tag, verp_tag(rest)):
        return VerpId(rest, signed=True)
    return VerpId("", signed=False)

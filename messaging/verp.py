"""The VERP return path: `bounces+<message public id>.<tag>@<return-path domain>`.

The tag is a short HMAC of the public id keyed from SECRET_KEY, so only a party that received the
message (and so saw its return path) can address a bounce to it: knowing a Message-ID, which
appears in every forwarded copy, is not enough. Relays may change the case of a local part, so
the tag is lower-case hex and compared case-insensitively.

The unsigned form `bounces+<public id>@…` written before the tag existed is still accepted while
MAILSERVICE_VERP_ACCEPT_UNSIGNED is on, and then only for messages created in the last
UNSIGNED_GRACE (MTAs stop retrying after five days, RFC 5321 4.5.4.1), so bounces of mail already
in flight when the signed form is deployed still find their message.
"""

import hmac
from dataclasses import dataclass
from datetime import timedelta

from django.utils.crypto import salted_hmac

VERP_PREFIX = "bounces"
TAG_LENGTH = 10  # hex digits: 40 bits, far beyond guessing at SMTP speed
UNSIGNED_GRACE = timedelta(days=7)
_SALT = "mailservice.verp"


def verp_tag(public_id: str) -> str:
    return salted_hmac(_SALT, public_id.lower(), algorithm="sha256").hexdigest()[:TAG_LENGTH]


def verp_local_part(public_id: str) -> str:
    return f"{VERP_PREFIX}+{public_id}.{verp_tag(public_id)}"


@dataclass(frozen=True)
class VerpId:
    public_id: str  # "" when the address carries none
    signed: bool  # the tag was present and right


def verp_parse(suffix: str) -> VerpId:
    """The part after `bounces+`: `<id>.<tag>` is signed when the tag matches; a wrong tag names nothing."""
    public_id, dot, tag = suffix.lower().rpartition(".")
    if not dot:
        return VerpId(suffix.lower(), signed=False)
    if public_id and hmac.compare_digest(tag, verp_tag(public_id)):
        return VerpId(public_id, signed=True)
    return VerpId("", signed=False)

"""The `Feedback-ID` header every outgoing message carries, inside its DKIM signature
(messaging/outbound/dkim.py SIGNED_HEADERS): `<template slug, or inline>:<API key's name, or empty>:
<sending domain>:<MAILSERVICE_FEEDBACK_SENDER_ID>`.

Gmail's feedback loop (https://support.google.com/a/answer/6254652, "Gmail Feedback Loop") reports
complaint rates per identifier of this header, colon-separated, the last one the sender's; it wants
few distinct values (no message or recipient ids), and the header signed by the sending domain. A
complaint report that quotes the header (headers-only ARF, messaging/inbound/services.py) finds the
message's domain by it too. Each field keeps letters, digits, dot, dash and underscore (others become
"-"), so a key named "ops: prod" cannot add a field.
"""

import re

from django.conf import settings

INLINE = "inline"
FIELD_LIMIT = 60
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def _field(value: str) -> str:
    return _UNSAFE.sub("-", value.strip())[:FIELD_LIMIT]


def feedback_id(*, template_slug: str | None, api_key_name: str, domain_name: str) -> str:
    """The header's value for a message of `domain_name` sent with a key named `api_key_name`."""
    fields = (template_slug or INLINE, api_key_name, domain_name, settings.MAILSERVICE_FEEDBACK_SENDER_ID)
    return ":".join(_field(value) for value in fields)

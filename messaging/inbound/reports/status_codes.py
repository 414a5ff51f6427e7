"""The codes reports carry: RFC 3463 enhanced status codes and RFC 5321 reply codes."""

import re

from messaging.inbound.reports.reading import LINE_LIMIT

# Failure statuses only (RFC 3463 classes 4 and 5): a transcript's 2.x.x successes are no evidence.
ENHANCED_STATUS = re.compile(r"\b([45])\.(\d{1,3})\.(\d{1,3})\b")
SMTP_REPLY = re.compile(r"(?<![\d.])([45]\d\d)(?:[ -]|$)")


def status_in(text: str) -> str:
    """The first failure status in the first LINE_LIMIT characters of `text` ("5.1.1"), or ""."""
    match = ENHANCED_STATUS.search(text[:LINE_LIMIT])
    return ".".join(match.groups()) if match else ""

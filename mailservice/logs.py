"""What every log line knows about its context: the request it serves, the message and domain it is about.

The request id is set by RequestIdMiddleware for the request's duration; the message id and domain
come with a log call (`extra={"message_id": …, "domain": …}`). LOG_FORMAT=json (settings.py) writes
them as fields of one JSON object per line; the text format leaves them out.
"""

import logging
from contextvars import ContextVar

request_id: ContextVar[str | None] = ContextVar("request_id", default=None)

CONTEXT_FIELDS = ("request_id", "message_id", "domain")


class ContextFilter(logging.Filter):
    """Gives every record the context fields, null where unknown, so each JSON line has the same keys."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "request_id", None) is None:
            record.request_id = request_id.get()
        for name in CONTEXT_FIELDS[1:]:
            if not hasattr(record, name):
                setattr(record, name, None)
        return True

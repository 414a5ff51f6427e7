"""Where signed messages go: an SMTP relay named by EMAIL_URL (messaging/outbound/relay.py), recipients'
own mail servers (`mx://`, messaging/outbound/direct/), or (unset) a file outbox (outbox.py).

The factory sits above the three: `transport()` builds the one EMAIL_URL names, once per process
(shared by its threads, so its pool of connections outlives a task), and `close_transports()` closes
what they keep open when a worker shuts down. A bad EMAIL_URL stops start-up (messaging/apps.py).
"""

import threading
from pathlib import Path
from urllib.parse import urlsplit

from django.conf import settings

from messaging.outbound.direct.transport import MxTransport
from messaging.outbound.envelope import Transport
from messaging.outbound.outbox import OutboxTransport
from messaging.outbound.relay import SmtpTransport
from messaging.outbound.smtp_client import RelayConfig


def is_direct_delivery(url: str) -> bool:
    """EMAIL_URL names direct delivery to recipients' MX hosts (mx://) rather than a relay."""
    return urlsplit(url).scheme == "mx"


def delivery_mode() -> str:
    """Which way mail leaves, in words for the console (never the relay's credentials)."""
    if not settings.EMAIL_URL:
        return f"file outbox ({settings.MAILSERVICE_OUTBOX_DIR}): nothing leaves this machine"
    if is_direct_delivery(settings.EMAIL_URL):
        return f"direct to the recipients' MX hosts (mx://, port {settings.MAILSERVICE_MX_PORT})"
    relay = RelayConfig.from_url(settings.EMAIL_URL)
    return f"through the relay {relay.host}:{relay.port} ({relay.security})"


_transports: dict[tuple, Transport] = {}
_transports_lock = threading.Lock()


def transport() -> Transport:
    """The transport EMAIL_URL names, one per process (shared by its threads) so its pool outlives a task."""
    key = (settings.EMAIL_URL, str(settings.MAILSERVICE_OUTBOX_DIR))
    with _transports_lock:
        if key not in _transports:
            if settings.EMAIL_URL and is_direct_delivery(settings.EMAIL_URL):
                _transports[key] = MxTransport()
            elif settings.EMAIL_URL:
                _transports[key] = SmtpTransport(
                    RelayConfig.from_url(settings.EMAIL_URL),
                    timeout=settings.MAILSERVICE_SMTP_TIMEOUT,
                    # Under a connection cap a batch's slot is given back with its connection: none kept idle.
                    pool_size=0 if settings.MAILSERVICE_RELAY_CONNECTIONS else settings.MAILSERVICE_SMTP_POOL_SIZE,
                )
            else:
                _transports[key] = OutboxTransport(Path(settings.MAILSERVICE_OUTBOX_DIR))
        return _transports[key]


def close_transports() -> None:
    """Close the connections the process's transports keep open between batches (QUIT, and the MX sessions'
    connection slots given back): a worker shutting down."""
    with _transports_lock:
        opened = list(_transports.values())
    for each in opened:
        each.close()

"""The TLS server context of the SMTP servers, from MAILSERVICE_TLS_CERT_FILE / MAILSERVICE_TLS_KEY_FILE."""

import ssl

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def server_tls_context() -> ssl.SSLContext | None:
    """A server context with the configured certificate chain and key; None when neither is set.

    A missing or unreadable file, or only one of the two set, is an ImproperlyConfigured with a
    one-line message, so a server refuses to start rather than run without the TLS it was given.
    """
    cert, key = settings.MAILSERVICE_TLS_CERT_FILE, settings.MAILSERVICE_TLS_KEY_FILE
    if not cert and not key:
        return None
    if not cert or not key:
        raise ImproperlyConfigured("set both MAILSERVICE_TLS_CERT_FILE and MAILSERVICE_TLS_KEY_FILE, or neither")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=cert, keyfile=key)
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ImproperlyConfigured(f"cannot load the TLS certificate {cert} and key {key}: {reason}") from None
    return context

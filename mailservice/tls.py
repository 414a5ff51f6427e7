"""The TLS context of the SMTP servers (inbound, and submission), from the operator's certificate.

Mailbox providers deliver bounces and complaints over TLS whenever the receiving server offers
STARTTLS, so the inbound server offers it once a certificate is configured.
"""

import ssl
from pathlib import Path

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


def server_tls_context() -> ssl.SSLContext | None:
    """A server context with MAILSERVICE_TLS_CERT_FILE and MAILSERVICE_TLS_KEY_FILE; None when both are unset.

    Raises ImproperlyConfigured, one line naming the file, when only one is set or one cannot be loaded.
    """
    cert_file, key_file = settings.MAILSERVICE_TLS_CERT_FILE, settings.MAILSERVICE_TLS_KEY_FILE
    if not cert_file and not key_file:
        return None
    if not cert_file or not key_file:
        raise ImproperlyConfigured("MAILSERVICE_TLS_CERT_FILE and MAILSERVICE_TLS_KEY_FILE must be set together")
    for name, path in (("MAILSERVICE_TLS_CERT_FILE", cert_file), ("MAILSERVICE_TLS_KEY_FILE", key_file)):
        if not Path(path).is_file():
            raise ImproperlyConfigured(f"{name}: no such file {path}")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(certfile=cert_file, keyfile=key_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or exc
        raise ImproperlyConfigured(
            f"cannot load the TLS certificate {cert_file} with key {key_file}: {reason}"
        ) from None
    return context

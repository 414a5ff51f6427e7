"""The TLS context of the SMTP servers (inbound, and submission), from the operator's certificate.

Mailbox providers deliver bounces and complaints over TLS whenever the receiving server offers
STARTTLS, so the inbound server offers it once a certificate is configured.
"""

import datetime
import ipaddress
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


def self_signed_certificate(
    directory: Path, *, host: str = "localhost", days: int = 1, names: tuple[str, str] = ("cert.pem", "key.pem")
) -> tuple[Path, Path]:
    """A fresh self-signed certificate for `host` (and 127.0.0.1) and its key, as PEM files in `directory`.
    It is its own CA, as `make-ssl-cert` makes a fresh Postfix's, so a client can be told to trust it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(host), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / names[0], directory / names[1]
    key_path.touch(mode=0o600)
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def development_certificate(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate for localhost and 127.0.0.1, made once in `directory` (var/tls/ in
    development) so `make submission` offers STARTTLS on a fresh checkout; never used unless DEBUG.

    Clients must trust it (it is its own CA) or skip verification, as for any self-signed certificate."""
    cert_path, key_path = directory / "dev-cert.pem", directory / "dev-key.pem"
    if cert_path.is_file() and key_path.is_file():
        return cert_path, key_path
    return self_signed_certificate(directory, days=825, names=(cert_path.name, key_path.name))


def development_tls_context(directory: Path) -> ssl.SSLContext:
    cert_path, key_path = development_certificate(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile=str(cert_path), keyfile=str(key_path))
    return context

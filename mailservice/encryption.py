"""Secrets at rest: Fernet tokens under the keys of `MAILSERVICE_ENCRYPTION_KEYS`.

The first key encrypts; every key decrypts (cryptography's MultiFernet), so keys rotate by adding
the new one first, running `manage.py reencrypt_secrets`, then dropping the old one. A model
stores a secret in an `EncryptedSecretField`, which is how `reencrypt_secrets` finds it.
Decrypt only where the plaintext is used (the DKIM signer), never to display anything.
"""

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


class UndecryptableSecret(Exception):
    """A stored token that none of the configured keys opens (a key was dropped too early, or the
    value was never encrypted)."""


class EncryptedSecretField(models.TextField):
    """A Fernet token made by `encrypt_secret`; holds no plaintext and never decrypts on load."""


@cache
def _fernet(keys: tuple[str, ...]) -> MultiFernet:
    if not keys:
        raise ImproperlyConfigured(
            "MAILSERVICE_ENCRYPTION_KEYS must be set when DEBUG is false: secrets such as DKIM private keys"
            " are stored encrypted with it (see docs/configuration.md)"
        )
    return MultiFernet([Fernet(key) for key in keys])


def require_encryption_keys() -> MultiFernet:
    """The configured keys; ImproperlyConfigured (with what to do) when there are none."""
    # Keyed by the setting's value, so a test (or a reloaded setting) that changes it takes effect.
    return _fernet(tuple(settings.MAILSERVICE_ENCRYPTION_KEYS))


def encrypt_secret(plaintext: str) -> str:
    return require_encryption_keys().encrypt(plaintext.encode()).decode()


def _open(token: str, operation: Callable[[MultiFernet, bytes], bytes]) -> str:
    try:
        return operation(require_encryption_keys(), token.encode()).decode()
    except InvalidToken:
        raise UndecryptableSecret("no key in MAILSERVICE_ENCRYPTION_KEYS decrypts this secret") from None


def decrypt_secret(token: str) -> str:
    return _open(token, MultiFernet.decrypt)


def reencrypt_secret(token: str) -> str:
    """The same secret encrypted under the first key (MultiFernet.rotate)."""
    return _open(token, MultiFernet.rotate)


@dataclass
class Reencryption:
    rewritten: dict[str, int]  # "app.Model.field": rows re-encrypted
    undecryptable: list[str]  # "app.Model.field pk=…" that no configured key opens


def reencrypt_all_secrets(*, batch_size: int = 500) -> Reencryption:
    """Rewrite every EncryptedSecretField value of every model under the first key.

    Row by row, each write conditional on the value read, so a secret changed meanwhile (a rotation)
    is left to its writer; safe to run again after an interruption.
    """
    result = Reencryption(rewritten={}, undecryptable=[])
    for model in apps.get_models():
        for field in model._meta.get_fields():
            if not isinstance(field, EncryptedSecretField):
                continue
            label = f"{model._meta.label}.{field.name}"
            result.rewritten[label] = 0
            rows = model._default_manager.exclude(**{field.name: ""}).values_list("pk", field.name)
            for pk, token in rows.iterator(chunk_size=batch_size):
                try:
                    fresh = reencrypt_secret(token)
                except UndecryptableSecret:
                    result.undecryptable.append(f"{label} pk={pk}")
                    continue
                result.rewritten[label] += model._default_manager.filter(pk=pk, **{field.name: token}).update(
                    **{field.name: fresh}
                )
    return result

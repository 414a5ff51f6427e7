"""System checks of the mail service's own settings."""

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register


@register(Tags.security, deploy=True)
def encryption_keys_configured(app_configs: Any, **kwargs: Any) -> list[CheckMessage]:
    if settings.MAILSERVICE_ENCRYPTION_KEYS:
        return []
    return [
        Error(
            "MAILSERVICE_ENCRYPTION_KEYS is not set: DKIM private keys cannot be stored or used.",
            hint='Generate a key with python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())" and set MAILSERVICE_ENCRYPTION_KEYS to it.',
            id="mailservice.E001",
        )
    ]

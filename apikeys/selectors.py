from apikeys.models import KEY_PREFIX_LENGTH, ApiKey


def apikey_get(*, prefix_or_id: str) -> ApiKey | None:
    """A key by its public id, its prefix, or the full key (whose prefix is then used)."""
    value = prefix_or_id.strip()
    if value.startswith("ms_") and len(value) >= 3 + KEY_PREFIX_LENGTH:
        value = value[3 : 3 + KEY_PREFIX_LENGTH]
    return ApiKey.objects.filter(public_id=value).first() or ApiKey.objects.filter(prefix=value).first()

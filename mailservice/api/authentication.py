from typing import Any

from rest_framework.authentication import BaseAuthentication
from rest_framework.exceptions import AuthenticationFailed
from rest_framework.request import Request

from apikeys.models import ApiKey
from apikeys.services import apikey_authenticate


class BearerKeyAuthentication(BaseAuthentication):
    """`Authorization: Bearer <API key>`. request.auth is the ApiKey; there is no user."""

    def authenticate(self, request: Request) -> tuple[Any, ApiKey] | None:
        header = request.META.get("HTTP_AUTHORIZATION", "")
        if not header:
            return None
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthenticationFailed("The Authorization header must be 'Bearer <API key>'")
        # The keys' version the rate limit middleware read with the request count (apikeys/cache.py).
        keys_version = getattr(request, "keys_version", None)
        api_key = apikey_authenticate(raw_key=token.strip(), keys_version=keys_version)
        if api_key is None:
            raise AuthenticationFailed("The API key is invalid or revoked")
        return None, api_key

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="api"'


def api_key_of(request: Request) -> ApiKey:
    """The key a request authenticated with; views behind CanSend or CanRead always have one."""
    assert isinstance(request.auth, ApiKey)
    return request.auth

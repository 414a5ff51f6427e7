"""The one HTTP path of every client: configuration, the bearer key, and turning replies into errors.

No call is ever repeated: a POST that failed may still have been accepted, so resending could
send the message twice. httpx does not retry by default and nothing here adds retries.
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from mailservice_client.errors import (
    ConfigurationError,
    MailServiceConnectionError,
    MailServiceError,
    error_from_response,
)

__version__ = "0.1.0"
DEFAULT_TIMEOUT = 30.0


@dataclass(frozen=True)
class Config:
    api_key: str
    base_url: str
    timeout: float


def resolve_config(*, api_key: str | None, base_url: str | None, timeout: float | None = None) -> Config:
    """Explicit values first, then MAILSERVICE_API_KEY / MAILSERVICE_BASE_URL."""
    api_key = api_key or os.environ.get("MAILSERVICE_API_KEY")
    base_url = base_url or os.environ.get("MAILSERVICE_BASE_URL")
    if not api_key:
        raise ConfigurationError("No API key: pass one or set MAILSERVICE_API_KEY")
    if not base_url:
        raise ConfigurationError("No base URL: pass one or set MAILSERVICE_BASE_URL")
    if not base_url.startswith(("http://", "https://")):
        raise ConfigurationError(f"The base URL must start with http:// or https:// (got {base_url!r})")
    return Config(
        api_key=api_key, base_url=base_url.rstrip("/"), timeout=DEFAULT_TIMEOUT if timeout is None else timeout
    )


@dataclass(frozen=True)
class Reply:
    status: int
    data: Any
    headers: dict[str, str]  # lower-case names

    @property
    def request_id(self) -> str | None:
        return self.headers.get("x-request-id")


def _client_options(config: Config) -> dict[str, Any]:
    return {
        "base_url": config.base_url,
        "timeout": config.timeout,
        "headers": {
            "Authorization": f"Bearer {config.api_key}",
            "Accept": "application/json",
            "User-Agent": f"mailservice-client-python/{__version__}",
        },
    }


def _reply(response: httpx.Response) -> Reply:
    headers = {name.lower(): value for name, value in response.headers.items()}
    if not 200 <= response.status_code < 300:
        raise error_from_response(response.status_code, headers, response.content)
    if response.status_code == 204:  # a removal: no body
        return Reply(status=response.status_code, data=None, headers=headers)
    try:
        data = response.json()
    except ValueError:
        raise MailServiceError(
            "The service answered with a body that is not JSON",
            code="InvalidResponse",
            status=response.status_code,
            request_id=headers.get("x-request-id"),
        ) from None
    return Reply(status=response.status_code, data=data, headers=headers)


def _connection_error(exc: httpx.TransportError, method: str) -> MailServiceConnectionError:
    hint = " (the message may or may not have been accepted; it was not resent)" if method == "POST" else ""
    return MailServiceConnectionError(f"{type(exc).__name__}: {exc}{hint}")


class SyncTransport:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._client = httpx.Client(**_client_options(config))

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        try:
            response = self._client.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as exc:
            raise _connection_error(exc, method) from exc
        return _reply(response)

    def close(self) -> None:
        self._client.close()


class AsyncTransport:
    def __init__(self, config: Config) -> None:
        self.config = config
        self._client = httpx.AsyncClient(**_client_options(config))

    async def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        try:
            response = await self._client.request(method, path, json=json, params=params, headers=headers)
        except httpx.TransportError as exc:
            raise _connection_error(exc, method) from exc
        return _reply(response)

    async def close(self) -> None:
        await self._client.aclose()

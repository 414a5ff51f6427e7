"""The native client: `MailService` (synchronous) and its `AsyncMailService` twin."""

from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import datetime
from typing import Any, cast, get_args
from urllib.parse import quote

from mailservice_client._http import AsyncTransport, SyncTransport, resolve_config
from mailservice_client._validate import check_send, check_string
from mailservice_client.errors import ValidationError
from mailservice_client.types import (
    Direction,
    Event,
    EventList,
    EventType,
    Message,
    MessageList,
    SendParams,
    SendResult,
    Suppression,
    SuppressionList,
    SuppressionReason,
)

SUPPRESSION_REASONS = get_args(SuppressionReason)
EVENT_TYPES = get_args(EventType)


def _list_params(limit: int | None, after: str | None, direction: Direction | None) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100:
            raise ValidationError("limit", "must be an integer from 1 to 100")
        params["limit"] = limit
    if after is not None:
        if not isinstance(after, str) or not 1 <= len(after) <= 512:
            raise ValidationError("after", "must be a string of 1 to 512 characters")
        params["after"] = after
    if direction is not None:
        if direction not in ("sent", "received"):
            raise ValidationError("direction", "must be 'sent' or 'received'")
        params["direction"] = direction
    return params


def _suppression_params(
    limit: int | None, after: str | None, reason: SuppressionReason | None, email: str | None
) -> dict[str, Any]:
    params = _list_params(limit, after, None)
    if reason is not None:
        if reason not in SUPPRESSION_REASONS:
            raise ValidationError("reason", f"must be one of {', '.join(SUPPRESSION_REASONS)}")
        params["reason"] = reason
    if email is not None:
        check_string(email, "email", max_length=320, allow_blank=False)
        params["email"] = email
    return params


def _event_params(
    limit: int | None, after: str | None, types: Sequence[EventType] | None, since: datetime | str | None
) -> dict[str, Any]:
    params = _list_params(limit, after, None)
    if types:
        if isinstance(types, str) or any(kind not in EVENT_TYPES for kind in types):
            raise ValidationError("type", f"must be a list of {', '.join(EVENT_TYPES)}")
        params["type"] = list(types)
    if since is not None:
        if isinstance(since, datetime):
            if since.tzinfo is None:
                raise ValidationError("since", "must carry its time zone")
            since = since.isoformat()
        check_string(since, "since", max_length=64, allow_blank=False)
        params["since"] = since
    return params


def _suppression_path(email: str) -> str:
    check_string(email, "email", max_length=320, allow_blank=False)
    return "/v1/suppressions/" + quote(email, safe="")


def _detail_body(detail: str | None) -> dict[str, str]:
    if detail is None:
        return {}
    check_string(detail, "detail", max_length=500)
    return {"detail": detail}


def idempotency_headers(key: str | None, field: str = "idempotency_key") -> dict[str, str]:
    """The Idempotency-Key header for a send: a retry with the same key never sends twice (24 hours)."""
    if key is None:
        return {}
    if not isinstance(key, str) or not 1 <= len(key) <= 256 or not all(" " <= char <= "~" for char in key):
        raise ValidationError(field, "must be 1 to 256 printable ASCII characters")
    return {"Idempotency-Key": key}


MAX_BATCH = 500  # the service's default MAILSERVICE_BATCH_MAX; a server set lower answers 400 itself


def check_batch(messages: Any) -> dict[str, Any]:
    """Validate a batch's sends, each as `send` would (the error names the item: `messages.3.to`); returns the body."""
    if not isinstance(messages, (list, tuple)) or not 1 <= len(messages) <= MAX_BATCH:
        raise ValidationError("messages", f"must be a list of 1 to {MAX_BATCH} sends")
    checked = []
    for index, params in enumerate(messages):
        try:
            checked.append(check_send(params))
        except ValidationError as exc:
            raise ValidationError(f"messages.{index}" + (f".{exc.field}" if exc.field else ""), exc.reason) from None
    return {"messages": checked}


def _batch_ids(data: Any) -> list[SendResult]:
    return cast(list[SendResult], data["data"])


def _message_path(message_id: str) -> str:
    check_string(message_id, "id", max_length=256, allow_blank=False)
    return "/v1/messages/" + quote(message_id, safe="")


class Messages:
    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def list(
        self, *, limit: int | None = None, after: str | None = None, direction: Direction | None = None
    ) -> MessageList:
        params = _list_params(limit, after, direction)
        return cast(MessageList, self._transport.request("GET", "/v1/messages", params=params).data)

    def iter(self, *, limit: int | None = None, direction: Direction | None = None) -> Iterator[Message]:
        """Every message, page after page, following `next_cursor`."""
        after = None
        while True:
            page = self.list(limit=limit, after=after, direction=direction)
            yield from page["data"]
            after = page["next_cursor"]
            if not page["has_more"] or not after:
                return

    def get(self, id: str) -> Message:  # noqa: A002 - the spec's name
        return cast(Message, self._transport.request("GET", _message_path(id)).data)


class Suppressions:
    """The key's side of its domain's suppression list (email.read; add and remove: suppressions.write)."""

    def __init__(self, transport: SyncTransport) -> None:
        self._transport = transport

    def list(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        reason: SuppressionReason | None = None,
        email: str | None = None,
    ) -> SuppressionList:
        params = _suppression_params(limit, after, reason, email)
        return cast(SuppressionList, self._transport.request("GET", "/v1/suppressions", params=params).data)

    def iter(self, *, limit: int | None = None, reason: SuppressionReason | None = None) -> Iterator[Suppression]:
        """Every suppression, newest first, page after page."""
        after = None
        while True:
            page = self.list(limit=limit, after=after, reason=reason)
            yield from page["data"]
            after = page["next_cursor"]
            if not page["has_more"] or not after:
                return

    def get(self, email: str) -> Suppression:
        return cast(Suppression, self._transport.request("GET", _suppression_path(email)).data)

    def add(self, email: str, *, detail: str | None = None) -> Suppression:
        """A `manual` suppression; an address already suppressed comes back unchanged."""
        path = _suppression_path(email)
        return cast(Suppression, self._transport.request("PUT", path, json=_detail_body(detail)).data)

    def remove(self, email: str) -> None:
        """The next send to the address goes out; NotFoundError when it is not suppressed."""
        self._transport.request("DELETE", _suppression_path(email))


class MailService:
    """`MailService(api_key=None, base_url=None)`; falls back to MAILSERVICE_API_KEY / MAILSERVICE_BASE_URL."""

    def __init__(self, api_key: str | None = None, base_url: str | None = None, timeout: float | None = None) -> None:
        self._transport = SyncTransport(resolve_config(api_key=api_key, base_url=base_url, timeout=timeout))
        self.messages = Messages(self._transport)
        self.suppressions = Suppressions(self._transport)

    def message_events(self, message_id: str) -> list[Event]:
        """Every event of a message, oldest first, each exactly its webhook's body."""
        path = _message_path(message_id) + "/events"
        return cast(list[Event], self._transport.request("GET", path).data["data"])

    def events_page(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        types: Sequence[EventType] | None = None,
        since: datetime | str | None = None,
    ) -> EventList:
        """One page of the domain's events, oldest first."""
        params = _event_params(limit, after, types, since)
        return cast(EventList, self._transport.request("GET", "/v1/events", params=params).data)

    def events(
        self,
        *,
        types: Sequence[EventType] | None = None,
        since: datetime | str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> Iterator[Event]:
        """The domain's events, oldest first, page after page from `after` (a page's next_cursor) or the start."""
        while True:
            page = self.events_page(limit=limit, after=after, types=types, since=since)
            yield from page["data"]
            after = page["next_cursor"]
            if not page["has_more"] or not after:
                return

    def send(self, params: SendParams, *, idempotency_key: str | None = None) -> SendResult:
        """Send one message; `params` are the wire fields (`from`, `to`, `subject`, `text`, `template`, ...).

        Checked locally first (a ValidationError names the field), since a dict built at run time
        may hold anything. With `idempotency_key`, retrying the call (say after a timeout) with the
        same key and params returns the first answer instead of sending again."""
        body = check_send(params)
        headers = idempotency_headers(idempotency_key)
        return cast(SendResult, self._transport.request("POST", "/v1/send", json=body, headers=headers).data)

    def send_batch(self, messages: list[SendParams], *, idempotency_key: str | None = None) -> list[SendResult]:
        """Send 1 to 500 messages in one request, all or none; each is what `send` takes.

        Returns each message's id (and created_at) in the order given. A refusal names the item,
        `messages.3.to`, and sends nothing; `idempotency_key` covers the whole batch."""
        body = check_batch(messages)
        headers = idempotency_headers(idempotency_key)
        return _batch_ids(self._transport.request("POST", "/v1/send/batch", json=body, headers=headers).data)

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> "MailService":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AsyncMessages:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def list(
        self, *, limit: int | None = None, after: str | None = None, direction: Direction | None = None
    ) -> MessageList:
        params = _list_params(limit, after, direction)
        return cast(MessageList, (await self._transport.request("GET", "/v1/messages", params=params)).data)

    async def iter(self, *, limit: int | None = None, direction: Direction | None = None) -> AsyncIterator[Message]:
        after = None
        while True:
            page = await self.list(limit=limit, after=after, direction=direction)
            for message in page["data"]:
                yield message
            after = page["next_cursor"]
            if not page["has_more"] or not after:
                return

    async def get(self, id: str) -> Message:  # noqa: A002 - the spec's name
        return cast(Message, (await self._transport.request("GET", _message_path(id))).data)


class AsyncSuppressions:
    def __init__(self, transport: AsyncTransport) -> None:
        self._transport = transport

    async def list(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        reason: SuppressionReason | None = None,
        email: str | None = None,
    ) -> SuppressionList:
        params = _suppression_params(limit, after, reason, email)
        return cast(SuppressionList, (await self._transport.request("GET", "/v1/suppressions", params=params)).data)

    async def iter(
        self, *, limit: int | None = None, reason: SuppressionReason | None = None
    ) -> AsyncIterator[Suppression]:
        after = None
        while True:
            page = await self.list(limit=limit, after=after, reason=reason)
            for entry in page["data"]:
                yield entry
            after = page["next_cursor"]
            if not page["has_more"] or not after:
                return

    async def get(self, email: str) -> Suppression:
        return cast(Suppression, (await self._transport.request("GET", _suppression_path(email))).data)

    async def add(self, email: str, *, detail: str | None = None) -> Suppression:
        path = _suppression_path(email)
        return cast(Suppression, (await self._transport.request("PUT", path, json=_detail_body(detail))).data)

    async def remove(self, email: str) -> None:
        await self._transport.request("DELETE", _suppression_path(email))


class AsyncMailService:
    """The asynchronous twin of `MailService`: the same methods, awaited."""

    def __init__(self, api_key: str | None = None, base_url: str | None = None, timeout: float | None = None) -> None:
        self._transport = AsyncTransport(resolve_config(api_key=api_key, base_url=base_url, timeout=timeout))
        self.messages = AsyncMessages(self._transport)
        self.suppressions = AsyncSuppressions(self._transport)

    async def message_events(self, message_id: str) -> list[Event]:
        path = _message_path(message_id) + "/events"
        return cast(list[Event], (await self._transport.request("GET", path)).data["data"])

    async def events_page(
        self,
        *,
        limit: int | None = None,
        after: str | None = None,
        types: Sequence[EventType] | None = None,
        since: datetime | str | None = None,
    ) -> EventList:
        params = _event_params(limit, after, types, since)
        return cast(EventList, (await self._transport.request("GET", "/v1/events", params=params)).data)

    async def events(
        self,
        *,
        types: Sequence[EventType] | None = None,
        since: datetime | str | None = None,
        limit: int | None = None,
        after: str | None = None,
    ) -> AsyncIterator[Event]:
        while True:
            page = await self.events_page(limit=limit, after=after, types=types, since=since)
            for event in page["data"]:
                yield event
            after = page["next_cursor"]
            if not page["has_more"] or not after:
                return

    async def send(self, params: SendParams, *, idempotency_key: str | None = None) -> SendResult:
        body = check_send(params)
        headers = idempotency_headers(idempotency_key)
        return cast(SendResult, (await self._transport.request("POST", "/v1/send", json=body, headers=headers)).data)

    async def send_batch(self, messages: list[SendParams], *, idempotency_key: str | None = None) -> list[SendResult]:
        body = check_batch(messages)
        headers = idempotency_headers(idempotency_key)
        return _batch_ids((await self._transport.request("POST", "/v1/send/batch", json=body, headers=headers)).data)

    async def close(self) -> None:
        await self._transport.close()

    async def __aenter__(self) -> "AsyncMailService":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.utils import (
    extend_schema,
)
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.permissions import BasePermission
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailservice import metrics
from mailservice.api import operations
from mailservice.api.authentication import api_key_of
from mailservice.api.parsers import BatchJSONParser
from mailservice.api.permissions import CanRead, CanSend, CanWriteSuppressions
from mailservice.api.serializers import (
    parse_event_list_query,
    parse_list_query,
    parse_send_batch,
    parse_send_request,
    parse_suppression_list_query,
    parse_suppression_put,
    query_check,
    send_response,
)
from mailservice.errors import ValidationFailed
from messaging.idempotency import HEADER as IDEMPOTENCY_HEADER
from messaging.idempotency import idempotency_key_parse, idempotent_send, request_hash
from messaging.selectors import (
    event_page,
    message_attachment,
    message_events,
    message_get,
    message_list,
    message_raw,
)
from messaging.services import message_send, message_send_batch
from messaging.suppressions import (
    api_address,
    suppression_add_manual,
    suppression_delete,
    suppression_get,
    suppression_page,
)
from messaging.wire import message_wire, suppression_wire
from webhooks.links import link_check
from webhooks.payloads import event_bodies, recorded_types

logger = logging.getLogger(__name__)


class ApiView(APIView):
    """An operation of /v1/: any query parameter but the ones it lists (`query_parameters`), or one given
    twice, is a 400, checked once the key is (a request is judged from its headers first)."""

    query_parameters: tuple[str, ...] = ()
    repeatable_parameters: tuple[str, ...] = ()  # those of query_parameters taken as a list (`?type=a&type=b`)

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        query_check(request.query_params, allowed=self.query_parameters, repeatable=self.repeatable_parameters)


class SendView(ApiView):
    permission_classes = [CanSend]

    @operations.send
    def post(self, request: Request) -> Response:
        started = time.perf_counter()
        key = idempotency_key_parse(request.headers.get(IDEMPOTENCY_HEADER))
        send_request = parse_send_request(request.data)
        api_key = api_key_of(request)
        domain = api_key.domain

        def send() -> dict[str, Any]:
            message = message_send(
                domain=domain, request=send_request, is_test=api_key.is_test, api_key_name=api_key.name
            )
            metrics.send_accepted(domain=domain.name, seconds=time.perf_counter() - started, is_test=message.is_test)
            logger.info("accepted", extra={"message_id": message.public_id, "domain": domain.name})
            return send_response(message)

        return _respond_once(request, key=key, send=send)


def _respond_once(request: Request, *, key: str | None, send: Callable[[], dict[str, Any]]) -> Response:
    """The 200 of `send`, run at most once per Idempotency-Key (`key`) when the request carries one."""
    if key is None:
        return Response(send())
    api_key = api_key_of(request)
    result = idempotent_send(
        domain=api_key.domain, is_test=api_key.is_test, key=key, body_hash=request_hash(request.data), send=send
    )
    return Response(result.response, headers={"Idempotent-Replayed": "true"} if result.replayed else None)


class SendBatchView(ApiView):
    """An addition to the spec's operations: many sends in one request, all or none."""

    permission_classes = [CanSend]
    parser_classes = [BatchJSONParser]

    @operations.send_batch
    def post(self, request: Request) -> Response:
        key = idempotency_key_parse(request.headers.get(IDEMPOTENCY_HEADER))
        send_requests = parse_send_batch(request.data)
        api_key = api_key_of(request)
        domain = api_key.domain

        def send() -> dict[str, Any]:
            messages = message_send_batch(
                domain=domain, requests=send_requests, is_test=api_key.is_test, api_key_name=api_key.name
            )
            metrics.batch_accepted(domain=domain.name, count=len(messages), is_test=api_key.is_test)
            logger.info("accepted a batch", extra={"messages": len(messages), "domain": domain.name})
            return {"data": [send_response(message) for message in messages]}

        return _respond_once(request, key=key, send=send)


class MessageListView(ApiView):
    permission_classes = [CanRead]
    query_parameters = ("limit", "after", "direction")

    @operations.list_messages
    def get(self, request: Request) -> Response:
        query = parse_list_query(request.query_params)
        page = message_list(
            domain=api_key_of(request).domain,
            is_test=api_key_of(request).is_test,
            direction=query.get("direction"),
            limit=query["limit"],
            after=query.get("after"),
        )
        data = [message_wire(message, include_text=False) for message in page.messages]
        return Response({"data": data, "has_more": page.has_more, "next_cursor": page.next_cursor})


class MessageDetailView(ApiView):
    permission_classes = [CanRead]

    @operations.get_message
    def get(self, request: Request, id: str) -> Response:  # noqa: A002 - the spec's parameter name
        if len(id) > 256:
            raise ValidationFailed("id: a message id is at most 256 characters")
        api_key = api_key_of(request)
        message = message_get(domain=api_key.domain, is_test=api_key.is_test, public_id=id)
        return Response(message_wire(message, include_text=True))


class MessageRawView(ApiView):
    """Additions to the spec, for `email.received` links: a received message's source."""

    permission_classes = [CanRead]
    query_parameters = ("token",)

    @operations.get_message_raw
    def get(self, request: Request, id: str) -> HttpResponse:  # noqa: A002 - as in getMessage
        link_check(path=request.path_info, token=request.query_params.get("token"))
        api_key = api_key_of(request)
        raw = message_raw(domain=api_key.domain, is_test=api_key.is_test, public_id=id)
        return HttpResponse(raw, content_type="message/rfc822")


class MessageAttachmentView(ApiView):
    permission_classes = [CanRead]
    query_parameters = ("token",)

    @operations.get_message_attachment
    def get(self, request: Request, id: str, index: int) -> HttpResponse:  # noqa: A002 - as in getMessage
        link_check(path=request.path_info, token=request.query_params.get("token"))
        api_key = api_key_of(request)
        attachment = message_attachment(domain=api_key.domain, is_test=api_key.is_test, public_id=id, index=index)
        response = HttpResponse(attachment.data, content_type=attachment.content_type)
        response["Content-Disposition"] = content_disposition_header(True, attachment.filename or f"attachment-{index}")
        return response


class MessageEventsView(ApiView):
    """An addition to the spec: a message's events, oldest first, each exactly its webhook's body."""

    permission_classes = [CanRead]

    @operations.list_message_events
    def get(self, request: Request, id: str) -> Response:  # noqa: A002 - as in getMessage
        if len(id) > 256:
            raise ValidationFailed("id: a message id is at most 256 characters")
        api_key = api_key_of(request)
        message = message_get(domain=api_key.domain, is_test=api_key.is_test, public_id=id)
        return Response({"data": event_bodies(message_events(message=message, types=recorded_types([])))})


class EventListView(ApiView):
    """An addition to the spec: the domain's event stream, oldest first."""

    permission_classes = [CanRead]
    query_parameters = ("limit", "after", "type", "since")
    repeatable_parameters = ("type",)

    @operations.list_events
    def get(self, request: Request) -> Response:
        query = parse_event_list_query(request.query_params)
        api_key = api_key_of(request)
        page = event_page(
            domain=api_key.domain,
            is_test=api_key.is_test,
            types=recorded_types(query.get("type", [])),
            since=query.get("since"),
            limit=query["limit"],
            after=query.get("after"),
        )
        return Response({"data": event_bodies(page.events), "has_more": page.has_more, "next_cursor": page.next_cursor})


class SuppressionListView(ApiView):
    """An addition to the spec: the key's side of the domain's suppression list, newest first."""

    permission_classes = [CanRead]
    query_parameters = ("limit", "after", "reason", "email")

    @operations.list_suppressions
    def get(self, request: Request) -> Response:
        query = parse_suppression_list_query(request.query_params)
        api_key = api_key_of(request)
        page = suppression_page(
            domain=api_key.domain,
            is_test=api_key.is_test,
            limit=query["limit"],
            after=query.get("after"),
            reason=query.get("reason"),
            address=api_address(query["email"]) if "email" in query else None,
        )
        data = [suppression_wire(entry) for entry in page.suppressions]
        return Response({"data": data, "has_more": page.has_more, "next_cursor": page.next_cursor})


class SuppressionDetailView(ApiView):
    """Additions to the spec: one address on the key's side of the list; reading it needs email.read,
    adding or removing it suppressions.write."""

    def get_permissions(self) -> list[BasePermission]:
        return [CanRead()] if self.request.method in ("GET", "HEAD", "OPTIONS") else [CanWriteSuppressions()]

    @operations.get_suppression
    def get(self, request: Request, email: str) -> Response:
        api_key = api_key_of(request)
        entry = suppression_get(domain=api_key.domain, is_test=api_key.is_test, address=api_address(email))
        return Response(suppression_wire(entry))

    @operations.put_suppression
    def put(self, request: Request, email: str) -> Response:
        address = api_address(email)
        body = parse_suppression_put(request.data)
        api_key = api_key_of(request)
        entry = suppression_add_manual(
            domain=api_key.domain, is_test=api_key.is_test, address=address, detail=body.get("detail", "")
        )
        return Response(suppression_wire(entry))

    @operations.delete_suppression
    def delete(self, request: Request, email: str) -> Response:
        api_key = api_key_of(request)
        suppression_delete(domain=api_key.domain, is_test=api_key.is_test, address=api_address(email))
        return Response(status=204)


class OpenApiDocumentView(ApiView, SpectacularJSONAPIView):
    """GET /v1/openapi.json: the document generated once per process, then served from memory.

    It is the same for every request (public, no authentication), generating it took 27 ms of CPU,
    several sends' worth, and drf-spectacular's generator is not safe in two threads at once: two first
    requests together failed with a 500 (drf-spectacular issue #1122)."""

    authentication_classes: list = []
    permission_classes: list = []
    _lock = threading.Lock()
    _generated: Response | None = None

    def handle_exception(self, exc: Exception) -> Response:
        # A refusal is the API's envelope as JSON, not in the OpenAPI document's media type.
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().handle_exception(exc)

    @extend_schema(exclude=True)  # as drf-spectacular's own view: not an operation of the API
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        with self._lock:
            if OpenApiDocumentView._generated is None:
                OpenApiDocumentView._generated = super().get(request, *args, **kwargs)
            generated = OpenApiDocumentView._generated
        return Response(generated.data, headers=dict(generated.headers))

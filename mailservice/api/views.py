import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiExample,
    OpenApiParameter,
    OpenApiResponse,
    PolymorphicProxySerializer,
    extend_schema,
)
from drf_spectacular.views import SpectacularJSONAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailservice import metrics
from mailservice.api.authentication import api_key_of
from mailservice.api.openapi import error_responses
from mailservice.api.parsers import BatchJSONParser
from mailservice.api.permissions import CanRead, CanSend
from mailservice.api.serializers import (
    InlineSendRequestSerializer,
    MessageListSerializer,
    MessageSerializer,
    SendBatchRequestSerializer,
    SendBatchResponseSerializer,
    SendResponseSerializer,
    TemplateSendRequestSerializer,
    parse_list_query,
    parse_send_batch,
    parse_send_request,
    query_check,
    send_response,
)
from mailservice.errors import ErrorCode, ValidationFailed
from messaging.idempotency import HEADER as IDEMPOTENCY_HEADER
from messaging.idempotency import idempotency_key_parse, idempotent_send, request_hash
from messaging.models import Direction
from messaging.selectors import message_attachment, message_get, message_list, message_raw
from messaging.services import message_send, message_send_batch
from messaging.wire import message_wire
from webhooks.links import link_check

logger = logging.getLogger(__name__)

_E = ErrorCode
# Every operation can meet these: a wrong key, a key without the permission, the rate limit, a database outage.
_ANY_OPERATION = (_E.UNAUTHORIZED, _E.MISSING_PERMISSION, _E.RATE_LIMITED, _E.SERVICE_UNAVAILABLE)

_READ_MESSAGES = {_E.MISSING_PERMISSION: "This API key lacks the email.read permission"}

_INLINE_EXAMPLE = {
    "from": "Demo <hello@demo.example>",
    "to": "you@example.org",
    "subject": "Hi",
    "text": "It works.",
    "html": "<p>It works.</p>",
}
_TEMPLATE_EXAMPLE = {
    "from": "Demo <hello@demo.example>",
    "to": ["you@example.org"],
    "template": {"id": "welcome", "variables": {"name": "Ada"}},
}
_MESSAGE_EXAMPLE = {
    "id": "msg_2Qm4kT9xVb7Lp1Zc",
    "domain_id": "dom_8Hn3Rt6Yw2Kq",
    "direction": "sent",
    "from": "Demo <hello@demo.example>",
    "to": ["you@example.org"],
    "subject": "Hi",
    "status": "delivered",
    "created_at": "2026-11-23T13:45:12.345678Z",
}


_IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER,
    {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[ -~]+$"},
    OpenApiParameter.HEADER,
    description="Send at most once per key and domain within 24 hours: a retry with the same key "
    "and body gets the first response again (with `Idempotent-Replayed: true`). A test key's keys "
    "are apart from live keys': the same key used by both sends once in each",
)
# What a send can be refused with, a single one or a batch.
_SEND_ERRORS = (
    _E.VALIDATION_ERROR,
    _E.INVALID_JSON,
    _E.INVALID_CONTENT_TYPE,
    _E.DOMAIN_NOT_VERIFIED,
    _E.TEMPLATE_NOT_FOUND,
    _E.MISSING_TEMPLATE_VARIABLE,
    _E.SENDER_NOT_ALLOWED,
    _E.REQUEST_TOO_LARGE,
    _E.ALLOWANCE_EXHAUSTED,
    _E.SENDING_PAUSED,
    _E.IDEMPOTENCY_KEY_REUSED,
    _E.IDEMPOTENCY_KEY_IN_FLIGHT,
    *_ANY_OPERATION,
)


class ApiView(APIView):
    """An operation of /v1/: any query parameter but the ones it lists (`query_parameters`), or one given
    twice, is a 400, checked once the key is (a request is judged from its headers first)."""

    query_parameters: tuple[str, ...] = ()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        query_check(request.query_params, allowed=self.query_parameters)


class SendView(ApiView):
    permission_classes = [CanSend]

    @extend_schema(
        operation_id="send",
        parameters=[_IDEMPOTENCY_PARAMETER],
        request=PolymorphicProxySerializer(
            component_name="SendRequest",
            serializers=[InlineSendRequestSerializer, TemplateSendRequestSerializer],
            resource_type_field_name=None,
        ),
        summary="Send a message",
        description="Inline `subject` with `text` and/or `html`, or a published `template` with `variables`. "
        "A 200 means the message is stored as `accepted` and will be dispatched exactly once.",
        examples=[
            OpenApiExample("Inline content", value=_INLINE_EXAMPLE, request_only=True),
            OpenApiExample("Published template", value=_TEMPLATE_EXAMPLE, request_only=True),
        ],
        responses={
            200: OpenApiResponse(
                SendResponseSerializer,
                description="Accepted",
                examples=[
                    OpenApiExample(
                        "Accepted",
                        value={"id": _MESSAGE_EXAMPLE["id"], "created_at": _MESSAGE_EXAMPLE["created_at"]},
                        response_only=True,
                    )
                ],
            ),
            **error_responses(*_SEND_ERRORS),
        },
    )
    def post(self, request: Request) -> Response:
        started = time.perf_counter()
        key = idempotency_key_parse(request.headers.get(IDEMPOTENCY_HEADER))
        send_request = parse_send_request(request.data)
        api_key = api_key_of(request)
        domain = api_key.domain

        def send() -> dict[str, Any]:
            message = message_send(domain=domain, request=send_request, is_test=api_key.is_test)
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


_BATCH_MESSAGES = {
    _E.VALIDATION_ERROR: "messages.3.to.0: must be an address like name@example.com or Name <name@example.com> "
    "(3 to 320 characters)",
    _E.TEMPLATE_NOT_FOUND: "messages.1.template.id: no template 'welcome' on this domain",
    _E.MISSING_TEMPLATE_VARIABLE: "messages.1.template.variables: no value for placeholder {{ name }}",
    _E.SENDER_NOT_ALLOWED: "messages.0.from: the sender must be on this key's domain (demo.example)",
    _E.REQUEST_TOO_LARGE: f"Request body is larger than {settings.MAILSERVICE_BATCH_MAX_BYTES} bytes",
}


class SendBatchView(ApiView):
    """An addition to the spec's operations: many sends in one request, all or none."""

    permission_classes = [CanSend]
    parser_classes = [BatchJSONParser]

    @extend_schema(
        operation_id="sendBatch",
        parameters=[_IDEMPOTENCY_PARAMETER],
        request=SendBatchRequestSerializer,
        summary="Send a batch of messages",
        description=f"1 to {settings.MAILSERVICE_BATCH_MAX} messages (`MAILSERVICE_BATCH_MAX`), each exactly as "
        "`POST /v1/send` takes it, inline or from a template; the body may be up to "
        f"{settings.MAILSERVICE_BATCH_MAX_BYTES} bytes (`MAILSERVICE_BATCH_MAX_BYTES`). All or nothing: any refusal "
        "is the one a single send would answer, naming the item (`messages.3.to.0: …`), and stores nothing; the "
        "allowance must hold every message. A 200 lists each message's id in the order of the items; every one is "
        "stored as `accepted` and will be dispatched exactly once, with its own events. An `Idempotency-Key` "
        "covers the whole batch. An addition to the spec's operations.",
        examples=[
            OpenApiExample(
                "Inline and template items",
                value={"messages": [_INLINE_EXAMPLE, _TEMPLATE_EXAMPLE]},
                request_only=True,
            )
        ],
        responses={
            200: OpenApiResponse(
                SendBatchResponseSerializer,
                description="Accepted, every message",
                examples=[
                    OpenApiExample(
                        "Accepted",
                        value={
                            "data": [
                                {"id": _MESSAGE_EXAMPLE["id"], "created_at": _MESSAGE_EXAMPLE["created_at"]},
                                {"id": "msg_7Wd1pR5sNc3Hx8Qa", "created_at": "2026-11-23T13:45:12.346012Z"},
                            ]
                        },
                        response_only=True,
                    )
                ],
            ),
            **error_responses(*_SEND_ERRORS, messages=_BATCH_MESSAGES),
        },
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key_parse(request.headers.get(IDEMPOTENCY_HEADER))
        send_requests = parse_send_batch(request.data)
        api_key = api_key_of(request)
        domain = api_key.domain

        def send() -> dict[str, Any]:
            messages = message_send_batch(domain=domain, requests=send_requests, is_test=api_key.is_test)
            metrics.batch_accepted(domain=domain.name, count=len(messages), is_test=api_key.is_test)
            logger.info("accepted a batch", extra={"messages": len(messages), "domain": domain.name})
            return {"data": [send_response(message) for message in messages]}

        return _respond_once(request, key=key, send=send)


class MessageListView(ApiView):
    permission_classes = [CanRead]
    query_parameters = ("limit", "after", "direction")

    @extend_schema(
        operation_id="listMessages",
        parameters=[
            OpenApiParameter(
                "limit", {"type": "integer", "minimum": 1, "maximum": 100}, description="Page size (default 20)"
            ),
            OpenApiParameter(
                "after",
                {"type": "string", "minLength": 1, "maxLength": 512},
                description="The next_cursor of the previous page",
            ),
            OpenApiParameter(
                "direction",
                {"type": "string", "enum": Direction.values},
                description="Only sent or only received messages (default both)",
            ),
        ],
        summary="List messages",
        description="Newest first, sent and received, one page at a time; list items carry `text: null`.",
        responses={
            200: OpenApiResponse(
                MessageListSerializer,
                description="A page of messages",
                examples=[
                    OpenApiExample(
                        "A page",
                        value={"data": [{**_MESSAGE_EXAMPLE, "text": None}], "has_more": False, "next_cursor": None},
                        response_only=True,
                    )
                ],
            ),
            **error_responses(_E.VALIDATION_ERROR, _E.INVALID_CURSOR, *_ANY_OPERATION, messages=_READ_MESSAGES),
        },
    )
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

    @extend_schema(
        operation_id="getMessage",
        parameters=[
            OpenApiParameter("id", {"type": "string", "minLength": 1, "maxLength": 256}, OpenApiParameter.PATH)
        ],
        summary="Get one message",
        description="One message of the key's domain with its plain-text body; another domain's id is a 404.",
        responses={
            200: OpenApiResponse(
                MessageSerializer,
                description="The message",
                examples=[
                    OpenApiExample("A message", value={**_MESSAGE_EXAMPLE, "text": "It works."}, response_only=True)
                ],
            ),
            **error_responses(_E.VALIDATION_ERROR, _E.NOT_FOUND, *_ANY_OPERATION, messages=_READ_MESSAGES),
        },
    )
    def get(self, request: Request, id: str) -> Response:  # noqa: A002 - the spec's parameter name
        if len(id) > 256:
            raise ValidationFailed("id: a message id is at most 256 characters")
        api_key = api_key_of(request)
        message = message_get(domain=api_key.domain, is_test=api_key.is_test, public_id=id)
        return Response(message_wire(message, include_text=True))


_MESSAGE_ID = OpenApiParameter("id", {"type": "string", "minLength": 1, "maxLength": 256}, OpenApiParameter.PATH)
_LINK_MESSAGES = {
    _E.MISSING_PERMISSION: "This API key lacks the email.read permission",
    _E.FORBIDDEN: "token: this link has expired",
}

_LINK_TOKEN = OpenApiParameter(
    "token",
    {"type": "string", "minLength": 1, "maxLength": 200},
    required=True,
    description="The token of the link an `email.received` event carries (it expires)",
)


class MessageRawView(ApiView):
    """Additions to the spec, for `email.received` links: a received message's source."""

    permission_classes = [CanRead]
    query_parameters = ("token",)

    @extend_schema(
        operation_id="getMessageRaw",
        summary="Get a received message's source",
        description="The raw source of a received message, exactly as it arrived, for the link an "
        "`email.received` event carries (its `token` expires). An addition to the spec's operations.",
        parameters=[_MESSAGE_ID, _LINK_TOKEN],
        responses={
            (200, "message/rfc822"): OpenApiTypes.BINARY,
            **error_responses(
                _E.VALIDATION_ERROR, _E.FORBIDDEN, _E.NOT_FOUND, *_ANY_OPERATION, messages=_LINK_MESSAGES
            ),
        },
    )
    def get(self, request: Request, id: str) -> HttpResponse:  # noqa: A002 - as in getMessage
        link_check(path=request.path_info, token=request.query_params.get("token"))
        api_key = api_key_of(request)
        raw = message_raw(domain=api_key.domain, is_test=api_key.is_test, public_id=id)
        return HttpResponse(raw, content_type="message/rfc822")


class MessageAttachmentView(ApiView):
    permission_classes = [CanRead]
    query_parameters = ("token",)

    @extend_schema(
        operation_id="getMessageAttachment",
        summary="Get a received message's attachment",
        description="Attachment number `index` (0-based, in the order `email.received` lists them) of a "
        "received message, for the link the event carries (its `token` expires). An addition to the spec's operations.",
        parameters=[
            _MESSAGE_ID,
            OpenApiParameter("index", {"type": "integer", "minimum": 0}, OpenApiParameter.PATH),
            _LINK_TOKEN,
        ],
        responses={
            (200, "application/octet-stream"): OpenApiTypes.BINARY,
            **error_responses(
                _E.VALIDATION_ERROR, _E.FORBIDDEN, _E.NOT_FOUND, *_ANY_OPERATION, messages=_LINK_MESSAGES
            ),
        },
    )
    def get(self, request: Request, id: str, index: int) -> HttpResponse:  # noqa: A002 - as in getMessage
        link_check(path=request.path_info, token=request.query_params.get("token"))
        api_key = api_key_of(request)
        attachment = message_attachment(domain=api_key.domain, is_test=api_key.is_test, public_id=id, index=index)
        response = HttpResponse(attachment.data, content_type=attachment.content_type)
        response["Content-Disposition"] = content_disposition_header(True, attachment.filename or f"attachment-{index}")
        return response


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

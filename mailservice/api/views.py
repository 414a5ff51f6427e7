from typing import Any

from django.http import HttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailservice.api.permissions import CanRead, CanSend
from mailservice.api.serializers import (
    ApiErrorSerializer,
    InlineSendRequestSerializer,
    MessageListSerializer,
    MessageSerializer,
    SendResponseSerializer,
    TemplateSendRequestSerializer,
    parse_list_query,
    parse_send_request,
)
from mailservice.errors import ValidationFailed
from messaging.idempotency import HEADER as IDEMPOTENCY_HEADER
from messaging.idempotency import idempotency_key_parse, idempotent_send, request_hash
from messaging.models import Direction
from messaging.selectors import message_attachment, message_get, message_list, message_raw
from messaging.services import message_send
from webhooks.links import link_check

_ERROR_DESCRIPTIONS = {
    400: "Invalid request content, invalid page cursor, or domain not verified",
    401: "Key missing, invalid or revoked",
    403: "Key lacks the permission, or sender on a different domain (or a link's token is invalid or expired)",
    404: "Message not found, or not available to this key",
    409: "Idempotency-Key used with another body (IdempotencyKeyReused) or still in flight (IdempotencyKeyInFlight)",
    413: "Request too large",
    429: "Too many requests (or the daily sending allowance is used up); see Retry-After",
    503: "Sending paused (no message was sent), or the service is temporarily unavailable",
}


def _errors(*statuses: int) -> dict[int, OpenApiResponse]:
    """The ApiError responses of an operation: its own statuses plus those every operation can give."""
    return {
        status: OpenApiResponse(ApiErrorSerializer, description=_ERROR_DESCRIPTIONS[status])
        for status in sorted({*statuses, 400, 401, 403, 429})
    }


class SendView(APIView):
    permission_classes = [CanSend]

    @extend_schema(
        operation_id="send",
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                {"type": "string", "minLength": 1, "maxLength": 256, "pattern": "^[ -~]+$"},
                OpenApiParameter.HEADER,
                description="Send at most once per key and domain within 24 hours: a retry with the same key "
                "and body gets the first response again (with `Idempotent-Replayed: true`)",
            )
        ],
        request=PolymorphicProxySerializer(
            component_name="SendRequest",
            serializers=[InlineSendRequestSerializer, TemplateSendRequestSerializer],
            resource_type_field_name=None,
        ),
        responses={200: SendResponseSerializer, **_errors(409, 413, 503)},
    )
    def post(self, request: Request) -> Response:
        key = idempotency_key_parse(request.headers.get(IDEMPOTENCY_HEADER))
        send_request = parse_send_request(request.data)
        domain = request.auth.domain

        def send() -> dict[str, Any]:
            message = message_send(domain=domain, request=send_request, is_test=request.auth.is_test)
            return SendResponseSerializer(message).data

        if key is None:
            return Response(send())
        result = idempotent_send(domain=domain, key=key, body_hash=request_hash(request.data), send=send)
        return Response(result.response, headers={"Idempotent-Replayed": "true"} if result.replayed else None)


class MessageListView(APIView):
    permission_classes = [CanRead]

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
        responses={200: MessageListSerializer, **_errors()},
    )
    def get(self, request: Request) -> Response:
        query = parse_list_query(request.query_params)
        page = message_list(
            domain=request.auth.domain,
            is_test=request.auth.is_test,
            direction=query.get("direction"),
            limit=query["limit"],
            after=query.get("after"),
        )
        return Response(MessageListSerializer(page).data)


class MessageDetailView(APIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="getMessage",
        parameters=[
            OpenApiParameter("id", {"type": "string", "minLength": 1, "maxLength": 256}, OpenApiParameter.PATH)
        ],
        responses={200: MessageSerializer, **_errors(404)},
    )
    def get(self, request: Request, id: str) -> Response:  # noqa: A002 - the spec's parameter name
        if len(id) > 256:
            raise ValidationFailed("id: a message id is at most 256 characters")
        message = message_get(domain=request.auth.domain, is_test=request.auth.is_test, public_id=id)
        return Response(MessageSerializer(message, context={"include_text": True}).data)


_MESSAGE_ID = OpenApiParameter("id", {"type": "string", "minLength": 1, "maxLength": 256}, OpenApiParameter.PATH)
_LINK_TOKEN = OpenApiParameter(
    "token",
    {"type": "string", "minLength": 1, "maxLength": 200},
    required=True,
    description="The token of the link an `email.received` event carries (it expires)",
)


class MessageRawView(APIView):
    """Additions to the spec, for `email.received` links: a received message's source."""

    permission_classes = [CanRead]

    @extend_schema(
        operation_id="getMessageRaw",
        parameters=[_MESSAGE_ID, _LINK_TOKEN],
        responses={(200, "message/rfc822"): OpenApiTypes.BINARY, **_errors(404)},
    )
    def get(self, request: Request, id: str) -> HttpResponse:  # noqa: A002 - as in getMessage
        link_check(path=request.path_info, token=request.query_params.get("token"))
        raw = message_raw(domain=request.auth.domain, is_test=request.auth.is_test, public_id=id)
        return HttpResponse(raw, content_type="message/rfc822")


class MessageAttachmentView(APIView):
    permission_classes = [CanRead]

    @extend_schema(
        operation_id="getMessageAttachment",
        parameters=[
            _MESSAGE_ID,
            OpenApiParameter("index", {"type": "integer", "minimum": 0}, OpenApiParameter.PATH),
            _LINK_TOKEN,
        ],
        responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, **_errors(404)},
    )
    def get(self, request: Request, id: str, index: int) -> HttpResponse:  # noqa: A002 - as in getMessage
        link_check(path=request.path_info, token=request.query_params.get("token"))
        attachment = message_attachment(
            domain=request.auth.domain, is_test=request.auth.is_test, public_id=id, index=index
        )
        response = HttpResponse(attachment.data, content_type=attachment.content_type)
        response["Content-Disposition"] = content_disposition_header(True, attachment.filename or f"attachment-{index}")
        return response

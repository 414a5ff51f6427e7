from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from mailservice.api.authentication import api_key_of
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
from messaging.models import Direction
from messaging.selectors import message_get, message_list
from messaging.services import message_send

_ERROR_DESCRIPTIONS = {
    400: "Invalid request content, invalid page cursor, or domain not verified",
    401: "Key missing, invalid or revoked",
    403: "Key lacks the permission, or sender on a different domain",
    404: "Message not found, or not available to this key",
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
        request=PolymorphicProxySerializer(
            component_name="SendRequest",
            serializers=[InlineSendRequestSerializer, TemplateSendRequestSerializer],
            resource_type_field_name=None,
        ),
        responses={200: SendResponseSerializer, **_errors(413, 503)},
    )
    def post(self, request: Request) -> Response:
        send_request = parse_send_request(request.data)
        message = message_send(domain=api_key_of(request).domain, request=send_request)
        return Response(SendResponseSerializer(message).data)


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
            domain=api_key_of(request).domain,
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
        message = message_get(domain=api_key_of(request).domain, public_id=id)
        return Response(MessageSerializer(message, context={"include_text": True}).data)

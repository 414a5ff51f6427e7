"""Request and response shapes of the API (spec section 2 and 4). Serializers validate; they never write."""

from collections.abc import Collection
from typing import Any

from django.conf import settings
from django.core.validators import RegexValidator
from django.http import QueryDict
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from mailservice.api.fields import (
    MAX_ADDRESSES,
    MAX_REPLY_TO,
    AddressOrListField,
    MailboxField,
    ReplyToField,
    StrictCharField,
    StrictIntegerField,
    TemplateVariablesField,
    is_valid_mailbox,
    is_valid_text,
)
from mailservice.errors import ValidationFailed
from messaging.models import Direction, Message, Status
from messaging.services import SendRequest, TemplateReference
from messaging.suppressions import MAX_API_DETAIL, REASON_OF_WIRE
from templates_app.models import SLUG_PATTERN as TEMPLATE_ID_PATTERN
from webhooks.payloads import MESSAGE_EVENT_TYPES

MAX_RECIPIENTS = 50
MAX_TEXT_LENGTH = 100000  # an inline send's subject, text and html


class StrictSerializer(serializers.Serializer):
    """Rejects fields it does not declare, naming them: nothing is silently ignored."""

    renamed_fields: dict[str, str] = {}  # Python name -> wire name, for wire names such as `from`

    def get_fields(self) -> dict[str, serializers.Field]:
        fields = super().get_fields()
        return {self.renamed_fields.get(name, name): field for name, field in fields.items()}

    # Groups of fields of which at least one must be present; also stated in the OpenAPI document.
    required_any_of: tuple[tuple[str, ...], ...] = ()

    def to_internal_value(self, data: Any) -> Any:
        # One answer names every offending field: the unknown ones, the missing ones of a group
        # and the invalid ones, each under its own name.
        problems: dict[str, Any] = {}
        if isinstance(data, dict):
            problems = {
                group[0]: f"at least one of {', '.join(group)} is required"
                for group in self.required_any_of
                if not any(name in data for name in group)
            }
            problems.update({key: "unknown field" for key in data if key not in self.fields})
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if problems and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **problems}) from None
            raise
        if problems:
            raise serializers.ValidationError(problems)
        return value


class TemplateReferenceSerializer(StrictSerializer):
    """A published template of the key's domain, by id or slug; without `version` the newest published one."""

    id = StrictCharField(allow_blank=False, max_length=100, validators=[RegexValidator(TEMPLATE_ID_PATTERN)])
    version = StrictIntegerField(min_value=1, required=False)
    variables = TemplateVariablesField(required=False)


class _SendBaseSerializer(StrictSerializer):
    renamed_fields = {"from_": "from"}

    from_ = MailboxField(source="from_address")
    to = AddressOrListField(required=False)
    cc = AddressOrListField(required=False)
    bcc = AddressOrListField(required=False)
    replyTo = ReplyToField(required=False)  # noqa: N815 - the wire name

    required_any_of: tuple[tuple[str, ...], ...] = (("to", "cc", "bcc"),)

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        recipients = sum(len(attrs.get(name, [])) for name in ("to", "cc", "bcc"))
        if recipients > MAX_RECIPIENTS:
            raise serializers.ValidationError(
                {"to": f"at most {MAX_RECIPIENTS} recipients in total across to, cc and bcc (got {recipients})"}
            )
        return attrs

    def to_send_request(self) -> SendRequest:
        data = self.validated_data
        template = data.get("template")
        return SendRequest(
            from_address=data["from_address"],
            to=data.get("to", []),
            cc=data.get("cc", []),
            bcc=data.get("bcc", []),
            reply_to=data.get("replyTo", []),
            subject=data.get("subject"),
            text=data.get("text"),
            html=data.get("html"),
            template=TemplateReference(**template) if template is not None else None,
        )


class InlineSendRequestSerializer(_SendBaseSerializer):
    """Variant A: the content is in the request."""

    required_any_of = (("to", "cc", "bcc"), ("text", "html"))

    subject = StrictCharField(max_length=MAX_TEXT_LENGTH)
    text = StrictCharField(max_length=MAX_TEXT_LENGTH, required=False)
    html = StrictCharField(max_length=MAX_TEXT_LENGTH, required=False)


class TemplateSendRequestSerializer(_SendBaseSerializer):
    """Variant B: the content comes from a published template of the key's domain."""

    template = TemplateReferenceSerializer()
    subject = StrictCharField(max_length=1000, required=False)


def parse_send_request(data: Any) -> SendRequest:
    """Validate a /v1/send body against the variant it claims (a `template` field means variant B)."""
    if isinstance(data, QueryDict) or not isinstance(data, dict):
        raise ValidationFailed("The request body must be a JSON object")
    valid_inline = _valid_inline_send_request(data)
    if valid_inline is not None:
        return valid_inline
    serializer_class = TemplateSendRequestSerializer if "template" in data else InlineSendRequestSerializer
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.to_send_request()


# The inline variant's fast path. A serializer builds each of its fields anew for every request
# (a deep copy of the declarations) and validates through several layers of DRF: 187 us of a
# one-recipient send, a sixth of its own CPU in the web server. A valid inline body is recognised
# here by the same rules in 13 us; any other body, and every template send, goes to the
# serializers, which stay the authority and word every error (tests/api/test_send_fast_path.py
# holds the two to the same answers). bench/results/before-after-round-seven.md has the figures.
_INLINE_FIELDS = frozenset({"from", "to", "cc", "bcc", "replyTo", "subject", "text", "html"})
_RECIPIENT_LISTS = (("to", MAX_ADDRESSES), ("cc", MAX_ADDRESSES), ("bcc", MAX_ADDRESSES), ("replyTo", MAX_REPLY_TO))


def _valid_mailboxes(value: Any, *, max_items: int) -> list[str] | None:
    """What AddressOrListField or ReplyToField would return for `value`, or None if they would refuse it."""
    if isinstance(value, str):
        return [value] if is_valid_mailbox(value) else None
    if isinstance(value, list) and 1 <= len(value) <= max_items and all(is_valid_mailbox(item) for item in value):
        return list(value)
    return None


def _valid_inline_send_request(data: dict[str, Any]) -> SendRequest | None:
    """The SendRequest InlineSendRequestSerializer would make of `data`, or None if it might refuse it."""
    if not (data.keys() <= _INLINE_FIELDS and "from" in data and "subject" in data):
        return None
    if "text" not in data and "html" not in data:
        return None
    if not is_valid_mailbox(data["from"]):
        return None
    lists: dict[str, list[str]] = {}
    for name, max_items in _RECIPIENT_LISTS:
        if name in data:
            items = _valid_mailboxes(data[name], max_items=max_items)
            if items is None:
                return None
            lists[name] = items
    to, cc, bcc = lists.get("to", []), lists.get("cc", []), lists.get("bcc", [])
    if not 1 <= len(to) + len(cc) + len(bcc) <= MAX_RECIPIENTS:  # none means none of to, cc and bcc is given
        return None
    texts = {name: data[name] for name in ("subject", "text", "html") if name in data}
    if not all(is_valid_text(value, max_length=MAX_TEXT_LENGTH) for value in texts.values()):  # null included
        return None
    return SendRequest(
        from_address=data["from"],
        to=to,
        cc=cc,
        bcc=bcc,
        reply_to=lists.get("replyTo", []),
        subject=texts["subject"],
        text=texts.get("text"),
        html=texts.get("html"),
    )


@extend_schema_field(
    {
        "type": "array",
        "items": {"$ref": "#/components/schemas/SendRequest"},
        "minItems": 1,
        "maxItems": settings.MAILSERVICE_BATCH_MAX,
    }
)
class _SendRequestListField(serializers.ListField):
    """The OpenAPI document's shape of a batch's items: each one POST /v1/send's body (parse_send_batch checks them)."""


class SendBatchRequestSerializer(StrictSerializer):
    """The OpenAPI document's shape of a POST /v1/send/batch body; parse_send_batch validates it."""

    messages = _SendRequestListField()


def parse_send_batch(data: Any) -> list[SendRequest]:
    """Validate a /v1/send/batch body: `messages`, 1 to MAILSERVICE_BATCH_MAX items, each a valid /v1/send body.

    The first invalid item is named, its own problems under its path (`messages.3.to.0: …`)."""
    if isinstance(data, QueryDict) or not isinstance(data, dict):
        raise ValidationFailed("The request body must be a JSON object")
    problems = {name: "unknown field" for name in data if name != "messages"}
    items = data.get("messages")
    limit = settings.MAILSERVICE_BATCH_MAX
    if not isinstance(items, list) or not items:
        problems["messages"] = f"must be a list of 1 to {limit} messages"
    elif len(items) > limit:
        problems["messages"] = f"at most {limit} messages in one batch (got {len(items)})"
    if problems or not isinstance(items, list):
        raise serializers.ValidationError(problems)
    requests = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise serializers.ValidationError({"messages": {str(index): "must be a JSON object"}})
        try:
            requests.append(parse_send_request(item))
        except serializers.ValidationError as exc:
            raise serializers.ValidationError({"messages": {str(index): exc.detail}}) from None
    return requests


class SendResponseSerializer(serializers.Serializer):
    """The OpenAPI document's shape of a send's answer; send_response builds it."""

    id = serializers.CharField(source="public_id", min_length=1)
    created_at = serializers.DateTimeField()


class SendBatchResponseSerializer(serializers.Serializer):
    """The OpenAPI document's shape of a batch's answer: each message's id, in the order of the request's items."""

    data = SendResponseSerializer(many=True)  # type: ignore[assignment]  # the wire field `data` shadows Serializer.data


_CREATED_AT = serializers.DateTimeField()  # keeps no state while formatting: one serves every answer


def send_response(message: Message) -> dict[str, str]:
    """SendResponseSerializer(message).data, without building a serializer per request (45 us)."""
    return {"id": message.public_id, "created_at": _CREATED_AT.to_representation(message.created_at)}


class MessageSerializer(StrictSerializer):
    """A Message. List items carry `text: null` (the body is only on get), so the list stays light."""

    renamed_fields = {"from_": "from"}

    id = serializers.CharField(source="public_id", min_length=1)
    domain_id = serializers.CharField(source="domain.public_id", min_length=1)
    direction = serializers.ChoiceField(choices=Direction.choices)
    from_ = serializers.CharField(source="from_address")
    to = serializers.ListField(child=serializers.CharField())
    subject = serializers.CharField()
    status = serializers.ChoiceField(choices=Status.choices)
    created_at = serializers.DateTimeField()
    text = serializers.SerializerMethodField()

    def get_text(self, message: Any) -> str | None:
        return message.text if self.context.get("include_text") else None


class MessageListSerializer(serializers.Serializer):
    data = MessageSerializer(many=True, source="messages")  # type: ignore[assignment]  # the wire field `data` shadows Serializer.data
    has_more = serializers.BooleanField()
    next_cursor = serializers.CharField(allow_null=True)


class ApiErrorDetailSerializer(serializers.Serializer):
    code = serializers.CharField(min_length=1)
    message = serializers.CharField()
    request_id = serializers.CharField(min_length=1)


class ApiErrorSerializer(serializers.Serializer):
    error = ApiErrorDetailSerializer()


class _QueryIntegerField(serializers.IntegerField):
    def to_internal_value(self, data: Any) -> int:
        if not isinstance(data, str) or not data.isascii() or not data.isdigit():
            raise serializers.ValidationError("must be a whole number")
        return super().to_internal_value(data)


class MessageListQuerySerializer(StrictSerializer):
    limit = _QueryIntegerField(min_value=1, max_value=100, required=False, default=20)
    after = serializers.CharField(min_length=1, max_length=512, required=False, trim_whitespace=False)
    direction = serializers.ChoiceField(choices=Direction.choices, required=False)


def query_check(query: QueryDict, *, allowed: Collection[str], repeatable: Collection[str] = ()) -> None:
    """400 unless every query parameter is one the operation takes, each given once (but those it takes
    as a list, `repeatable`): a parameter the operation does not know would be silently ignored, and of
    a repeated one (`?token=x&token=<valid>`) each reader could take a different value."""
    unknown = [name for name in query if name not in allowed]
    if unknown:
        raise ValidationFailed(f"{unknown[0]}: unknown query parameter")
    repeated = [name for name, values in query.lists() if len(values) > 1 and name not in repeatable]
    if repeated:
        raise ValidationFailed(f"{repeated[0]}: may be given only once")


def parse_list_query(query: QueryDict) -> dict[str, Any]:
    serializer = MessageListQuerySerializer(data=query.dict())
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


# --- Additions to the spec: suppressions and events (docs/api.md) ------------------------------------------------


class SuppressionSerializer(serializers.Serializer):
    """The OpenAPI document's shape of a suppression; messaging.wire.suppression_wire builds it."""

    email = serializers.CharField(help_text="The bare address, lower-case, as the list compares it")
    reason = serializers.ChoiceField(choices=list(REASON_OF_WIRE))
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True, help_text="Soft-bounce entries lapse then; else null")
    message_id = serializers.CharField(allow_null=True, help_text="The message whose report caused it, if any")
    detail = serializers.CharField(allow_blank=True)


class SuppressionListSerializer(serializers.Serializer):
    data = SuppressionSerializer(many=True)  # type: ignore[assignment]  # the wire field `data` shadows Serializer.data
    has_more = serializers.BooleanField()
    next_cursor = serializers.CharField(allow_null=True)


class SuppressionPutSerializer(StrictSerializer):
    detail = StrictCharField(max_length=MAX_API_DETAIL, required=False, help_text="A note kept with the entry")


class SuppressionListQuerySerializer(StrictSerializer):
    limit = _QueryIntegerField(min_value=1, max_value=100, required=False, default=20)
    after = serializers.CharField(min_length=1, max_length=512, required=False, trim_whitespace=False)
    reason = serializers.ChoiceField(choices=list(REASON_OF_WIRE), required=False)
    email = serializers.CharField(max_length=1000, required=False, trim_whitespace=False)


# The email.* events of the OpenAPI document's `webhooks` section (mailservice/api/webhook_schemas.py registers them).
_EVENT_SCHEMA = {
    "oneOf": [
        {"$ref": f"#/components/schemas/{''.join(part.capitalize() for part in event_type.split('.'))}Event"}
        for event_type in MESSAGE_EVENT_TYPES
    ]
}


@extend_schema_field({"type": "array", "items": _EVENT_SCHEMA})
class _EventListField(serializers.ListField):
    """Events, each exactly the body of its webhook."""


class MessageEventsSerializer(serializers.Serializer):
    data = _EventListField()  # type: ignore[assignment]  # the wire field `data` shadows Serializer.data


class EventListSerializer(serializers.Serializer):
    data = _EventListField()  # type: ignore[assignment]  # the wire field `data` shadows Serializer.data
    has_more = serializers.BooleanField()
    next_cursor = serializers.CharField(allow_null=True)


class EventListQuerySerializer(StrictSerializer):
    limit = _QueryIntegerField(min_value=1, max_value=100, required=False, default=20)
    after = serializers.CharField(min_length=1, max_length=512, required=False, trim_whitespace=False)
    type = serializers.ListField(child=serializers.ChoiceField(choices=MESSAGE_EVENT_TYPES), required=False)
    since = serializers.DateTimeField(required=False)


def parse_suppression_list_query(query: QueryDict) -> dict[str, Any]:
    serializer = SuppressionListQuerySerializer(data=query.dict())
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def parse_suppression_put(data: Any) -> dict[str, Any]:
    """PUT /v1/suppressions/{email}'s body: `{}` or `{"detail": …}` (no body at all is `{}`)."""
    if isinstance(data, QueryDict) and not data:
        data = {}
    if isinstance(data, QueryDict) or not isinstance(data, dict):
        raise ValidationFailed("The request body must be a JSON object")
    serializer = SuppressionPutSerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def parse_event_list_query(query: QueryDict) -> dict[str, Any]:
    data: dict[str, Any] = query.dict()
    if "type" in query:
        data["type"] = query.getlist("type")
    serializer = EventListQuerySerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data

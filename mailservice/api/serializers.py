"""Request and response shapes of the API (spec section 2 and 4). Serializers validate; they never write."""

from typing import Any

from django.core.validators import RegexValidator
from django.http import QueryDict
from rest_framework import serializers

from mailservice.api.fields import (
    AddressOrListField,
    MailboxField,
    ReplyToField,
    StrictCharField,
    StrictIntegerField,
    TemplateVariablesField,
)
from mailservice.errors import ValidationFailed
from messaging.models import Direction, Status
from messaging.services import SendRequest, TemplateReference
from templates_app.models import SLUG_PATTERN as TEMPLATE_ID_PATTERN

MAX_RECIPIENTS = 50


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

    subject = StrictCharField(max_length=100000)
    text = StrictCharField(max_length=100000, required=False)
    html = StrictCharField(max_length=100000, required=False)


class TemplateSendRequestSerializer(_SendBaseSerializer):
    """Variant B: the content comes from a published template of the key's domain."""

    template = TemplateReferenceSerializer()
    subject = StrictCharField(max_length=1000, required=False)


def parse_send_request(data: Any) -> SendRequest:
    """Validate a /v1/send body against the variant it claims (a `template` field means variant B)."""
    if isinstance(data, QueryDict) or not isinstance(data, dict):
        raise ValidationFailed("The request body must be a JSON object")
    serializer_class = TemplateSendRequestSerializer if "template" in data else InlineSendRequestSerializer
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.to_send_request()


class SendResponseSerializer(serializers.Serializer):
    id = serializers.CharField(source="public_id", min_length=1)
    created_at = serializers.DateTimeField()


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


def parse_list_query(query: QueryDict) -> dict[str, Any]:
    repeated = [name for name, values in query.lists() if len(values) > 1]
    if repeated:
        raise ValidationFailed(f"{repeated[0]}: may be given only once")
    serializer = MessageListQuerySerializer(data=query.dict())
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data

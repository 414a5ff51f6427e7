"""How the OpenAPI document says what the serializers enforce, beyond what drf-spectacular infers."""

from typing import Any

from drf_spectacular.openapi import AutoSchema
from drf_spectacular.utils import OpenApiExample, OpenApiResponse

from mailservice.api.serializers import ApiErrorSerializer
from mailservice.errors import STATUS_OF_CODE, ErrorCode


class ApiSchema(AutoSchema):
    """Adds each serializer's `required_any_of` groups ("at least one of to, cc or bcc")."""

    def _map_serializer(self, serializer: Any, direction: str, bypass_extensions: bool = False) -> dict[str, Any]:
        schema = super()._map_serializer(serializer, direction, bypass_extensions)
        groups = [
            {"anyOf": [{"required": [name]} for name in group]} for group in getattr(serializer, "required_any_of", ())
        ]
        if groups:
            schema["allOf"] = groups
        return schema


def close_object_schemas(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Every object in the spec has `No additional properties`, and every request body is required."""
    for schema in result.get("components", {}).get("schemas", {}).values():
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
    for item in result.get("paths", {}).values():
        for operation in item.values():
            if "requestBody" in operation:
                operation["requestBody"]["required"] = True
    return result


# --- Examples and per-operation errors ---------------------------------------------------
# Each operation lists only the errors it can really answer with, one example per code, so
# Swagger UI shows real envelopes and "Try it out" sends a request that works (with `make run`'s
# demo key authorized, the inline example sends from the demo domain).

_ERROR_EXAMPLES: dict[ErrorCode, str] = {
    ErrorCode.VALIDATION_ERROR: "subject: This field is required.",
    ErrorCode.INVALID_JSON: "Request body is not valid JSON",
    ErrorCode.INVALID_CONTENT_TYPE: "Content-Type must be application/json",
    ErrorCode.DOMAIN_NOT_VERIFIED: "The domain demo.example is not verified",
    ErrorCode.TEMPLATE_NOT_FOUND: "template.id: no template 'welcome' on this domain",
    ErrorCode.MISSING_TEMPLATE_VARIABLE: "template.variables: no value for placeholder {{ name }}",
    ErrorCode.INVALID_CURSOR: "after: invalid cursor",
    ErrorCode.UNAUTHORIZED: "The API key is invalid or revoked",
    ErrorCode.MISSING_PERMISSION: "This API key lacks the email.send permission",
    ErrorCode.SENDER_NOT_ALLOWED: "from: the sender must be on this key's domain (demo.example)",
    ErrorCode.NOT_FOUND: "No message with that id",
    ErrorCode.REQUEST_TOO_LARGE: "Request body is larger than 4194304 bytes",
    ErrorCode.RATE_LIMITED: "Too many requests; wait before retrying",
    ErrorCode.ALLOWANCE_EXHAUSTED: "The daily sending allowance of 10000 messages for demo.example is used up",
    ErrorCode.SENDING_PAUSED: (
        "Sending is paused for this domain by an operator (moving to a new relay): production sending is not "
        "activated for this domain; "
        "no message was sent"
    ),
    ErrorCode.FORBIDDEN: "Forbidden",
    ErrorCode.IDEMPOTENCY_KEY_REUSED: "Idempotency-Key: this key was used with a different request body",
    ErrorCode.IDEMPOTENCY_KEY_IN_FLIGHT: "Idempotency-Key: a request with this key is still being processed",
    ErrorCode.SERVICE_UNAVAILABLE: "The service is temporarily unavailable",
}

_REQUEST_ID = "req_5f1c0e9a03d2b7c4e1a8f6d0"
_STATUS_SUMMARY = {
    400: "Bad request",
    401: "No valid API key",
    403: "Not allowed for this key",
    404: "Not found",
    409: "Conflict with an earlier request's Idempotency-Key",
    413: "Request too large",
    429: "Too many requests; see Retry-After",
    503: "Temporarily unavailable",
}


def error_responses(*codes: ErrorCode, messages: dict[ErrorCode, str] | None = None) -> dict[int, OpenApiResponse]:
    """The ApiError responses of one operation, grouped by status, each code with its example
    (`messages` replaces an example's message where the operation words it differently)."""
    examples = {**_ERROR_EXAMPLES, **(messages or {})}
    by_status: dict[int, list[ErrorCode]] = {}
    for code in codes:
        by_status.setdefault(STATUS_OF_CODE[code], []).append(code)
    return {
        status: OpenApiResponse(
            ApiErrorSerializer,
            description=f"{_STATUS_SUMMARY[status]}: " + ", ".join(f"`{code}`" for code in status_codes),
            examples=[
                OpenApiExample(
                    str(code),
                    value={"error": {"code": str(code), "message": examples[code], "request_id": _REQUEST_ID}},
                    status_codes=[str(status)],
                    response_only=True,
                )
                for code in status_codes
            ],
        )
        for status, status_codes in sorted(by_status.items())
    }


def add_webhook_components(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """The components of the `webhooks` section: drf-spectacular (0.30) builds the components before
    it processes the webhooks, so the schemas they register would be missing (dangling $refs)."""
    schemas = generator.registry.build({}).get("schemas", {})
    result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in schemas.items():
        result["components"]["schemas"].setdefault(name, schema)
    return result

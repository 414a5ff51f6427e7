"""How the OpenAPI document says what the serializers enforce, beyond what drf-spectacular infers."""

from typing import Any

from drf_spectacular.openapi import AutoSchema


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


def add_webhook_components(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """The components of the `webhooks` section: drf-spectacular (0.30) builds the components before
    it processes the webhooks, so the schemas they register would be missing (dangling $refs)."""
    schemas = generator.registry.build({}).get("schemas", {})
    result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in schemas.items():
        result["components"]["schemas"].setdefault(name, schema)
    return result

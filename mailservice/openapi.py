from typing import Any


def close_object_schemas(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """Every object in the spec has `No additional properties`; say so in each component."""
    for schema in result.get("components", {}).get("schemas", {}).values():
        if schema.get("type") == "object" and "properties" in schema:
            schema.setdefault("additionalProperties", False)
    return result

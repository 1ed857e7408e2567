"""A small JSON-Schema subset: enough to check request bodies and to document them.

The same dicts go into the OpenAPI document, so they must stay plain JSON
Schema.  Supported keywords: type, properties, required, additionalProperties
(false or a schema), items, minItems, maxItems, minLength, maxLength,
minimum, maximum, enum, nullable.
"""

from __future__ import annotations

from typing import Any

__all__ = ["SchemaError", "check"]

_PY_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list,),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
}


class SchemaError(ValueError):
    """The value does not fit the schema; the message names the offending path."""


def check(value: Any, schema: dict[str, Any], path: str = "body") -> None:
    """Raise :class:`SchemaError` when ``value`` does not fit ``schema``."""
    if value is None and schema.get("nullable"):
        return
    kind = schema.get("type")
    if kind is not None:
        types = _PY_TYPES[kind]
        if not isinstance(value, types) or (kind in ("integer", "number") and isinstance(value, bool)):
            raise SchemaError(f"{path}: expected {kind}, got {_json_type(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise SchemaError(f"{path}: must be one of {schema['enum']}")
    if isinstance(value, str):
        _check_bounds(len(value), schema, "minLength", "maxLength", path, "characters")
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(f"{path}: must be >= {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(f"{path}: must be <= {schema['maximum']}")
    elif isinstance(value, list):
        _check_bounds(len(value), schema, "minItems", "maxItems", path, "items")
        items = schema.get("items")
        if items:
            for i, item in enumerate(value):
                check(item, items, f"{path}[{i}]")
    elif isinstance(value, dict):
        _check_object(value, schema, path)


def _check_bounds(n: int, schema: dict[str, Any], lo: str, hi: str, path: str, unit: str) -> None:
    if lo in schema and n < schema[lo]:
        raise SchemaError(f"{path}: needs at least {schema[lo]} {unit}")
    if hi in schema and n > schema[hi]:
        raise SchemaError(f"{path}: allows at most {schema[hi]} {unit}")


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> None:
    props = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in value:
            raise SchemaError(f"{path}: missing field '{key}'")
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in props:
            check(item, props[key], f"{path}.{key}")
        elif extra is False:
            raise SchemaError(f"{path}: unknown field '{key}'")
        elif isinstance(extra, dict):
            check(item, extra, f"{path}.{key}")


def _json_type(value: Any) -> str:
    for name, types in _PY_TYPES.items():
        if isinstance(value, types) and not (name in ("integer", "number") and isinstance(value, bool)):
            return "integer" if name == "integer" else name
    return "null" if value is None else type(value).__name__

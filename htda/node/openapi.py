"""The OpenAPI 3.1 document, generated from the node's route table.

Request and answer schemas are those :mod:`msgspec` writes for the routes' types (:mod:`htda.protocol`); they
are JSON Schema 2020-12, which OpenAPI 3.1 uses as it is.  Examples: a request's from its type, an answer's
from its route (a real node's answer) or else from its type.  A request body's own schema is written in place (a
reader sees its fields at once), the types it and the answers refer to under ``components/schemas``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..protocol.base import schemas

if TYPE_CHECKING:
    from .rest import Route

ERROR_SCHEMA = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {"status": {"type": "integer"}, "message": {"type": "string"}},
            "required": ["status", "message"],
        }
    },
    "required": ["error"],
}


def document(routes: Iterable[Route], title: str, version: str) -> dict[str, Any]:
    """Build the document; paths use OpenAPI's ``{name}`` templates."""
    routes = list(routes)
    kinds = sorted({kind for route in routes for kind in (route.body, route.response) if kind is not None},
                   key=repr)
    refs, components = schemas(kinds)
    by_kind = dict(zip(kinds, refs))
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        template = re.sub(r"\{([^}:]+)(:[^}]*)?\}", r"{\1}", route.path)
        paths.setdefault(template, {})[route.method.lower()] = _operation(route, by_kind, components)
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version,
                 "description": "HTDA node REST API. State-changing requests need an HTDA-HMAC signature."},
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": {"Error": ERROR_SCHEMA, **dict(sorted(components.items()))},
            "securitySchemes": {
                "htdaHmac": {"type": "apiKey", "in": "header", "name": "Authorization",
                             "description": "HTDA-HMAC ts=<unix>,nonce=<hex>,sig=<hmac-sha256>"}
            },
        },
    }


def _operation(route: Route, by_kind: dict[Any, dict[str, Any]], components: dict[str, Any]) -> dict[str, Any]:
    op: dict[str, Any] = {
        "summary": route.summary,
        "operationId": _operation_id(route),
        "tags": [route.tag],
        "responses": {
            "200": {"description": "success", "content": {
                route.content_type: {"schema": by_kind[route.response] if route.response is not None
                                      else _raw_schema(route.content_type)}}},
            "400": _error_response("bad request"),
            "404": _error_response("not found"),
        },
    }
    example = route.example if route.example is not None else getattr(route.response, "example", None)
    if example is not None:
        op["responses"]["200"]["content"][route.content_type]["example"] = example
    parameters = [{"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
                  for name in route.params]
    parameters += [{"name": name, "in": "query", "required": False, "description": text,
                    "schema": {"type": "string"}} for name, text in route.query.items()]
    parameters += [{"name": name, "in": "header", "required": False, "description": text,
                    "schema": {"type": "string"}} for name, text in route.headers.items()]
    for status, text in route.statuses.items():
        raw = {"description": text, "content": {route.content_type: {"schema": _raw_schema(route.content_type)}}}
        op["responses"][str(status)] = raw if status < 300 else _error_response(text)
    if parameters:
        op["parameters"] = parameters
    if route.body is not None:
        body: dict[str, Any] = {"schema": _in_place(by_kind[route.body], components)}
        if getattr(route.body, "example", None) is not None:
            body["example"] = route.body.example
        op["requestBody"] = {"required": True, "content": {"application/json": body}}
        op["responses"]["413"] = _error_response("request body too large")
    if route.access != "public":
        op["security"] = [{"htdaHmac": []}]
        op["responses"]["401"] = _error_response("missing or bad signature")
    return op


def _raw_schema(content_type: str) -> dict[str, Any]:
    """The schema of a body that is not JSON: bytes of a copy, or text (HTML, Prometheus)."""
    if content_type.startswith("application/octet-stream"):
        return {"type": "string", "format": "binary"}
    return {"type": "string"}


def _error_response(text: str) -> dict[str, Any]:
    return {"description": text, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def _operation_id(route: Route) -> str:
    words = re.findall(r"[A-Za-z0-9]+", route.path.replace("/api/v1", ""))
    return route.method.lower() + "_" + "_".join(words)


def _in_place(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    """A reference to a named schema replaced by that schema (its own references stay)."""
    ref = schema.get("$ref", "")
    return dict(components[ref.rsplit("/", 1)[1]]) if ref.startswith("#/components/schemas/") else schema

"""What every role's contract is made of: request and answer types, endpoints, decoding with a 400-ready message.

Request bodies are :class:`Body` structs (``msgspec``): unknown fields are refused, and a body that does not fit
its type raises :class:`ProtocolError` whose message names the place (``body.jobs[0]: unknown field 'x'``).
Answers are :class:`Answer` structs: the server's answer is documented and checked by them, and a client
tolerates fields it does not know (a newer server may add some).  ``msgspec`` also writes each type's JSON
Schema, which the OpenAPI document carries.
"""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Generic, TypeVar
from urllib.parse import quote

import msgspec
from msgspec import UNSET, Meta, UnsetType

from . import paths

__all__ = ["API", "Answer", "Body", "Endpoint", "Lfn", "Name", "ProtocolError", "Text", "Time", "UNSET",
           "UnsetType", "check_answer", "decode", "encode", "schemas", "to_wire", "unset_or"]

API = paths.API

#: a node, job or group name
Name = Annotated[str, Meta(min_length=1, max_length=255)]
#: free text that may be empty (an empty task is no task)
Text = Annotated[str, Meta(max_length=255)]
#: a logical file name as sent (normalised by the receiver)
Lfn = Annotated[str, Meta(min_length=1, max_length=4096)]
#: seconds since the epoch
Time = Annotated[float, Meta(ge=0)]
#: a count of bytes (it fits the coordinator's 64-bit database columns)
Bytes = Annotated[int, Meta(ge=0, lt=1 << 62)]


class Body(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A request body: every field declared, nothing else accepted.

    ``example`` (a class variable, not a field) is a typical request as a client sends it: the OpenAPI
    document shows it, and the tests decode it with this type."""

    example: ClassVar[dict[str, Any] | None] = None


class Answer(msgspec.Struct, kw_only=True):
    """An answer body: the fields a server sends; a client ignores others.

    ``example`` (a class variable) is a typical answer, shown where a route gives none of its own (a route's
    example is a real node's answer, checked against one by the tests)."""

    example: ClassVar[dict[str, Any] | None] = None


T = TypeVar("T")


class ProtocolError(ValueError):
    """A body that does not fit its type; the message names the offending place."""


_AT = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_WORDING = ((re.compile(r"^Object contains unknown field `(.*)`$", re.S), r"unknown field '\1'"),
            (re.compile(r"^Object missing required field `(.*)`$", re.S), r"missing field '\1'"))


def _message(exc: Exception, root: str, kind: Any) -> str:
    m = _AT.match(str(exc))
    assert m is not None  # the pattern matches any text
    text, path = m["msg"], m["path"] or ""
    for pattern, wording in _WORDING:
        text = pattern.sub(wording, text)
    if text.startswith("Invalid enum value"):
        allowed = _enum_at(kind, path)
        if allowed:
            text += f": must be one of {', '.join(map(str, allowed))}"
    return f"{root}{path}: {text}"


@functools.lru_cache(maxsize=256)
def _schema(kind: Any) -> dict[str, Any]:
    return msgspec.json.schema(kind)


def _enum_at(kind: Any, path: str) -> list[Any]:
    """The values allowed at ``path`` (``.events[0].state``) of ``kind``'s schema, if an enum is there."""
    root = _schema(kind)
    node: Any = root
    for key, _index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        while isinstance(node, dict) and "$ref" in node:
            node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
        if not isinstance(node, dict):
            return []
        node = node.get("properties", {}).get(key) if key else node.get("items")
    while isinstance(node, dict) and "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return list(node.get("enum", [])) if isinstance(node, dict) else []


def decode(raw: bytes, kind: type[T], root: str = "body") -> T:
    """Decode and check a JSON body; :class:`ProtocolError` (a 400) for anything wrong."""
    if not raw:
        raise ProtocolError("request body must be JSON")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise ProtocolError(_message(exc, root, kind)) from None
    except msgspec.DecodeError as exc:
        raise ProtocolError(f"request body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("request body is nested too deeply") from None


def check_answer(value: Any, kind: type[T], root: str = "answer") -> T:
    """An answer (or request) already parsed from JSON, checked and converted to ``kind``."""
    try:
        return msgspec.convert(value, kind)
    except msgspec.ValidationError as exc:
        raise ProtocolError(_message(exc, root, kind)) from None


def to_wire(value: Any) -> Any:
    """A struct (or anything holding structs) as plain JSON values; fields left unset are left out."""
    return msgspec.to_builtins(value)


#: A struct (or anything holding structs) as JSON bytes, what :func:`to_wire` gives written out (fields in their
#: declared order, fields left unset left out, non-ASCII as UTF-8) without the plain values in between: how the
#: REST layer writes a typed answer (an assignment list of 10,000 files in a few milliseconds).
encode = msgspec.json.Encoder().encode


A = TypeVar("A")


@dataclass(frozen=True)
class Endpoint(Generic[A]):
    """One operation of a role: method, path template (``{name}``, ``{name:path}``), body and answer types."""

    method: str
    path: str
    request: type[Any] | None = None
    response: type[A] | None = None

    def url(self, base: str = "", query: dict[str, Any] | None = None, **params: str) -> str:
        """The path (after ``base``) with its parameters filled in, quoted, and a query string."""

        def fill(m: re.Match[str]) -> str:
            value = params[m["name"]]
            return quote(value.lstrip("/"), safe="/") if m["kind"] == "path" else quote(value, safe="")

        path = re.sub(r"\{(?P<name>[^}:]+)(?::(?P<kind>[^}]*))?\}", fill, self.path)
        if query:
            path += "?" + "&".join(f"{k}={quote(str(v), safe='')}" for k, v in query.items())
        return base.rstrip("/") + path


def schemas(kinds: list[type[Any]], template: str = "#/components/schemas/{name}") -> tuple[
        list[dict[str, Any]], dict[str, Any]]:
    """JSON Schemas of ``kinds`` (references to ``template``) and the named schemas they refer to."""
    refs, components = msgspec.json.schema_components(kinds, ref_template=template)
    return _cleaned(list(refs)), _cleaned(components)


def _cleaned(value: Any) -> Any:
    """Every ``description`` as :func:`inspect.cleandoc` leaves it: msgspec writes a class's docstring as
    Python keeps it, which is indented up to 0.22 and dedented from 0.23 (and from Python 3.13), so the
    schemas would depend on the versions installed."""
    if isinstance(value, dict):
        return {key: inspect.cleandoc(item) if key == "description" and isinstance(item, str) else _cleaned(item)
                for key, item in value.items()}
    if isinstance(value, list):
        return [_cleaned(item) for item in value]
    return value


def unset_or(value: T | UnsetType, default: T) -> T:
    """A field's value, or ``default`` when the sender left it out."""
    return default if isinstance(value, UnsetType) else value

"""Configuration: TOML files checked against declarative schemas at start-up.

Every component declares the schema of its own section; the node runtime
declares ``[node]``, ``[pool]`` and ``[tls]``.  Validation stops at the first
problem with a one-line message naming the file and the dotted key, e.g.::

    config/node.toml: unknown key 'pool.heartbeat_intervall' (did you mean 'heartbeat_interval'?)
"""

from __future__ import annotations

import difflib
import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ConfigError", "Field", "ListOf", "Section", "REQUIRED", "load_toml", "validate"]


class ConfigError(Exception):
    """A configuration problem; ``str()`` is a complete one-line message."""


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()

_INT64 = (-(1 << 63), (1 << 63) - 1)
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}


@dataclass(frozen=True)
class Field:
    """One key: its type, default (or ``REQUIRED``), help text and an optional check.

    ``type`` is ``str``, ``int``, ``float``, ``bool``, ``list`` (of ``item``),
    a nested :class:`Section`, or a :class:`ListOf` sections.  ``check`` gets
    the converted value and returns an error text, or ``None`` when fine.
    """

    type: Any
    default: Any = REQUIRED
    help: str = ""
    item: Any = str
    check: Callable[[Any], str | None] | None = None


@dataclass(frozen=True)
class ListOf:
    """A TOML array of tables, each checked against ``section``."""

    section: "Section"


@dataclass(frozen=True)
class Section:
    """A table of fields.  Keys not declared here are errors."""

    fields: Mapping[str, Field] = field(default_factory=dict)
    help: str = ""
    #: a check of the whole table (keys that constrain each other): gets the converted table, returns an
    #: error text naming the keys, or ``None`` when fine
    check: Callable[[dict[str, Any]], str | None] | None = None


def load_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a TOML file, turning syntax errors into a :class:`ConfigError`."""
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None


def validate(raw: Mapping[str, Any], schema: Section, source: str, prefix: str = "") -> dict[str, Any]:
    """Return ``raw`` with defaults filled in, or raise :class:`ConfigError`."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{source}: '{prefix.rstrip('.') or '<top>'}' must be a table")
    for key in raw:
        if key not in schema.fields:
            hint = difflib.get_close_matches(key, list(schema.fields), n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else ""
            raise ConfigError(f"{source}: unknown key '{prefix}{key}'{extra}")
    out: dict[str, Any] = {}
    for key, spec in schema.fields.items():
        dotted = prefix + key
        if key in raw:
            out[key] = _convert(raw[key], spec, source, dotted)
        elif isinstance(spec.type, Section):
            out[key] = validate({}, spec.type, source, dotted + ".")
        elif spec.default is REQUIRED:
            raise ConfigError(f"{source}: missing required key '{dotted}'")
        else:
            out[key] = spec.default() if callable(spec.default) else spec.default
    if schema.check is not None:
        problem = schema.check(out)
        if problem:
            raise ConfigError(f"{source}: '{prefix.rstrip('.') or '<top>'}': {problem}")
    return out


def plugin_of(group: str, exclude: tuple[str, ...] = ()) -> Callable[[str], str | None]:
    """A :class:`Field` check: the value names an installed plugin of the entry-point ``group``."""
    from . import plugins  # here, not at the top: plugins import nothing of the config, and stay cheap to load

    def check(value: str) -> str | None:
        known = [p for p in plugins.available(group) if p not in exclude]
        return None if value in known else f"names no {group} plugin (available: {', '.join(known)})"

    return check


def _convert(value: Any, spec: Field, source: str, dotted: str) -> Any:
    kind = spec.type
    if isinstance(kind, Section):
        return validate(value, kind, source, dotted + ".")
    if isinstance(kind, ListOf):
        if not isinstance(value, list):
            raise ConfigError(f"{source}: '{dotted}' must be a list of tables")
        return [validate(v, kind.section, source, f"{dotted}[{i}].") for i, v in enumerate(value)]
    if kind is list:
        if not isinstance(value, list):
            raise ConfigError(f"{source}: '{dotted}' must be a list")
        value = [_scalar(v, spec.item, source, f"{dotted}[{i}]") for i, v in enumerate(value)]
    else:
        value = _scalar(value, kind, source, dotted)
    if spec.check is not None:
        problem = spec.check(value)
        if problem:
            raise ConfigError(f"{source}: '{dotted}' {problem}")
    return value


def _scalar(value: Any, kind: type, source: str, dotted: str) -> Any:
    # bool is a subclass of int in Python; a TOML `true` must not pass as a number.
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, kind) and not (kind in (int, float) and isinstance(value, bool)):
        # TOML has inf and nan, and Python's integers have no bound: every number here is a count, a size or a
        # time that SQLite, the C kernels and sleep() take as a finite 64-bit value
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{source}: '{dotted}' must be a finite number, not {value!r}")
        if isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
            raise ConfigError(f"{source}: '{dotted}' must be an integer from {_INT64[0]:,} to {_INT64[1]:,}, "
                              f"not {value}")
        return value
    got = type(value).__name__
    raise ConfigError(f"{source}: '{dotted}' must be {_TYPE_NAMES.get(kind, kind.__name__)}, not {got} {value!r}")


def positive(value: float) -> str | None:
    """Check helper: the value must be > 0."""
    return None if value > 0 else "must be greater than 0"


def non_negative(value: float) -> str | None:
    """Check helper: the value must be >= 0."""
    return None if value >= 0 else "must not be negative"


def fraction(value: float) -> str | None:
    """Check helper: the value must be a fraction in (0, 1]."""
    return None if 0.0 < value <= 1.0 else "must be a fraction in (0, 1]"


def share(value: float) -> str | None:
    """Check helper: the value must be a share in [0, 1]."""
    return None if 0.0 <= value <= 1.0 else "must be in [0, 1]"


def one_of(*choices: str) -> Callable[[Any], str | None]:
    """Check helper: the value must be one of ``choices``."""

    def check(value: Any) -> str | None:
        return None if value in choices else f"must be one of {', '.join(choices)}"

    return check

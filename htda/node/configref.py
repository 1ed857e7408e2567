"""The configuration reference (``docs/configuration.rst``), generated from the schemas the node validates
against, so the page cannot drift from what start-up accepts (a test compares the two).

    python -m htda.node.configref > docs/configuration.rst
"""

from __future__ import annotations

from typing import Any

from . import plugins
from .config import REQUIRED, Field, ListOf, Section
from .runtime import COMPONENT_GROUP, NODE_SCHEMA

__all__ = ["reference"]

_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}

_INTRO = """\
Configuration reference
=======================

.. This page is generated from the schemas the node validates its config against:
   python -m htda.node.configref > docs/configuration.rst  (tests/node/test_configref.py keeps it in step)

A node reads one TOML file (``htda-node --config FILE``; ``--check`` validates it
and exits).  ``[node]``, ``[pool]`` and ``[tls]`` belong to every node; each
component named in ``node.components`` reads its own section, which may be
omitted to take every default.  Unknown keys, wrong types and bad values stop
start-up with one line naming the file and the key; relative paths are relative
to the config file's folder.  The examples in ``config/`` are the ones the tests
load.
"""


def reference() -> str:
    """The whole page, as reStructuredText."""
    parts = [_INTRO]
    for name, spec in NODE_SCHEMA.fields.items():
        parts.append(_section(f"[{name}]", spec.type, name))
    for name in plugins.available(COMPONENT_GROUP):
        component = plugins.load(COMPONENT_GROUP, name)
        parts.append(_section(f"[{name}]", component.config_schema, name, (component.__doc__ or "").strip()))
    return "\n".join(parts).rstrip() + "\n"


def _section(title: str, section: Section, prefix: str, about: str = "") -> str:
    lines = [title, "-" * len(title), ""]
    if about:
        lines += [about.splitlines()[0], ""]
    if not section.fields:
        return "\n".join(lines + ["No keys.", ""])
    lines.append(_table(section, prefix))
    for key, spec in section.fields.items():
        if isinstance(spec.type, ListOf):
            sub = f"{prefix}.{key}[]"
            lines += ["", f"Each entry of ``{prefix}.{key}`` (``{sub}``):", "", _table(spec.type.section, sub)]
    return "\n".join(lines) + "\n"


def _table(section: Section, prefix: str) -> str:
    rows = [(f"``{key}``", _type(spec), _default(spec), _meaning(spec)) for key, spec in section.fields.items()]
    header = ("key", "type", "default", "meaning")
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    rule = "  ".join("=" * w for w in widths)

    def fmt(cells: tuple[str, ...]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()

    return "\n".join([rule, fmt(header), rule, *map(fmt, rows), rule])


def _type(spec: Field) -> str:
    if isinstance(spec.type, ListOf):
        return "list of tables"
    if isinstance(spec.type, Section):
        return "table"
    if spec.type is list:
        return f"list of {_TYPES.get(spec.item, 'value')}s"
    return _TYPES.get(spec.type, str(spec.type))


def _default(spec: Field) -> str:
    if spec.default is REQUIRED:
        return "(required)"
    value: Any = spec.default() if callable(spec.default) else spec.default
    if isinstance(value, bool):
        return f"``{str(value).lower()}``"
    if isinstance(value, str):
        return f'``"{value}"``' if value else '``""``'
    if isinstance(value, list):
        return "``[" + ", ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in value) + "]``"
    return f"``{value}``"


def _meaning(spec: Field) -> str:
    return " ".join(spec.help.split()) or "-"


if __name__ == "__main__":
    print(reference(), end="")

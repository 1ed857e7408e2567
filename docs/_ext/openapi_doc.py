"""Sphinx directive ``.. openapi:: FILE``: the REST reference, generated from the OpenAPI document."""

import json
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList


class OpenAPIDirective(Directive):
    required_arguments = 1

    def run(self):
        env = self.state.document.settings.env
        path = Path(env.srcdir) / self.arguments[0]
        env.note_dependency(str(path))
        doc = json.loads(path.read_text())
        lines: list[str] = []
        by_tag: dict[str, list] = {}
        for route, ops in doc["paths"].items():
            for method, op in ops.items():
                by_tag.setdefault(op["tags"][0], []).append((route, method.upper(), op))
        for tag in sorted(by_tag):
            lines += [tag, "-" * len(tag), ""]
            for route, method, op in sorted(by_tag[tag]):
                access = "signed" if op.get("security") else "public"
                lines += [f"``{method} {route}``", f"    {op['summary']} (*{access}*)", ""]
                request = op.get("requestBody", {}).get("content", {}).get("application/json", {})
                if request.get("schema"):
                    lines += _literal("Request body schema", request["schema"])
                if "example" in request:
                    lines += _literal("Example request", request["example"])
                for content in op["responses"]["200"].get("content", {}).values():
                    ref = content.get("schema", {}).get("$ref", "")
                    if ref:
                        lines += [f"    Answer: ``{ref.rsplit('/', 1)[1]}`` (see `Schemas`_)", ""]
                examples = [c["example"] for c in op["responses"]["200"].get("content", {}).values() if "example" in c]
                for example in examples:
                    lines += _literal("Example answer", example)
        schemas = doc.get("components", {}).get("schemas", {})
        if schemas:
            lines += ["Schemas", "-------", "",
                      "The types of requests and answers (``htda.protocol``), as JSON Schema.", ""]
            for name, schema in sorted(schemas.items()):
                lines += [f"``{name}``", ""] + _literal("Schema", schema)
        container = nodes.section()
        container.document = self.state.document
        self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, container,
                                match_titles=True)
        return container.children


def _literal(title, value):
    """An indented ``title::`` block showing ``value`` as JSON."""
    return [f"    {title}::", ""] + ["        " + line for line in json.dumps(value, indent=2).splitlines()] + [""]


def setup(app):
    app.add_directive("openapi", OpenAPIDirective)
    return {"parallel_read_safe": True}

"""The dashboard component: ``GET /dashboard`` and the JSON summary its page polls."""

from __future__ import annotations

import json
import threading
from importlib import resources
from typing import Any

from ..node.component import Component
from ..node.config import Field, Section, positive
from ..node.rest import HTTPError, Request, Response, Route
from ..protocol import dashboard as proto
from ..protocol.base import encode
from .summary import SummaryBuilder

__all__ = ["DashboardComponent"]

#: the page's files (htda/static/), served by name only: nothing else is reachable
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                                "base-uri 'none'; frame-ancestors 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("Cache-Control", "no-cache"),
]


def _load_static() -> dict[str, tuple[bytes, str]]:
    files = {}
    for entry in resources.files("htda").joinpath("static").iterdir():
        suffix = "." + entry.name.rpartition(".")[2]
        if entry.is_file() and suffix in STATIC_TYPES:
            files[entry.name] = (entry.read_bytes(), STATIC_TYPES[suffix])
    return files


class DashboardComponent(Component):
    """Serves the pool dashboard: plain HTML/JS polling ``/api/v1/dashboard/summary``."""

    name = "dashboard"
    config_schema = Section({
        "public": Field(bool, False, "serve the page and its summary to anyone (default: signed requests and "
                                     "pool.read_networks only, like other read-only queries)"),
        "refresh": Field(float, 3.0, "seconds between the page's refreshes", check=positive),
        "peer_timeout": Field(float, 2.0, "seconds to wait for each other member's answer", check=positive),
        "top_files": Field(int, 20, "best-rated files listed", check=positive),
    })

    def __init__(self, node, config: dict[str, Any]):
        super().__init__(node, config)
        self.static = _load_static()
        self.builder = SummaryBuilder(node, config["peer_timeout"], config["top_files"])
        # Several open pages share one summary per half refresh period.
        self._cache: tuple[float, bytes] = (0.0, b"")
        self._lock = threading.Lock()  # guards _cache; held while a summary is built, so other polls wait for it
        self._built = node.metrics.counter("htda_dashboard_summaries_total", "pool summaries built")

    def stop(self) -> None:
        self.builder.close()

    def routes(self) -> list[Route]:
        access = "public" if self.config["public"] else "read"
        return [
            Route.of(proto.PAGE, self._page, "the pool dashboard (HTML)", access=access, tag="dashboard",
                     content_type="text/html"),
            Route.of(proto.STATIC, self._static, "the dashboard's scripts and styles", access=access,
                     tag="dashboard", content_type="text/plain"),
            Route.of(proto.SUMMARY, self._summary,
                  "pool members, cache usage, staging, hit ratio and top files in one answer",
                  access=access, tag="dashboard"),
        ]

    def _page(self, request: Request) -> Response:
        body, kind = self.static["index.html"]
        settings = json.dumps({"refresh": self.config["refresh"]})
        page = body.replace(b"{{settings}}", settings.replace("&", "&amp;").replace('"', "&quot;").encode())
        return Response(page, content_type=kind, headers=list(SECURITY_HEADERS))

    def _static(self, request: Request) -> Response:
        name = request.params["name"]
        if name not in self.static or name == "index.html":
            raise HTTPError(404, "no such dashboard file")
        body, kind = self.static[name]
        return Response(body, content_type=kind, headers=list(SECURITY_HEADERS))

    def _summary(self, request: Request) -> Response:
        with self._lock:
            built_at, body = self._cache
            if self.node.clock.monotonic() - built_at >= self.config["refresh"] / 2 or not body:
                body = encode(self.builder.build())
                self._cache = (self.node.clock.monotonic(), body)
                self._built.inc()
        return Response(body, headers=[("Cache-Control", "no-cache")])

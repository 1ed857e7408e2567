"""The dashboard's contract: its page and the one summary its script polls."""

from __future__ import annotations

from typing import Any

from . import paths
from .base import Answer, Endpoint
from .node import NodeInfo

__all__ = ["PAGE", "STATIC", "SUMMARY", "Summary", "Totals"]


class Totals(Answer):
    cache_nodes: int
    capacity_bytes: int
    used_bytes: int
    free_bytes: int
    files: int
    staging: int


class Summary(Answer):
    """Pool members, cache usage, staging, hit ratio and top files in one answer; a part whose member did not
    answer is ``{"error": ...}``."""

    node: NodeInfo
    time: float
    heartbeat_interval: float
    expiry: float
    members: list[dict[str, Any]]
    totals: Totals
    staging: list[dict[str, Any]]
    top_files: dict[str, Any]
    hits: dict[str, Any] | None


PAGE: Endpoint[str] = Endpoint("GET", paths.DASHBOARD_PAGE)  # HTML
STATIC: Endpoint[str] = Endpoint("GET", paths.DASHBOARD_STATIC)  # scripts and styles
SUMMARY = Endpoint("GET", paths.DASHBOARD_SUMMARY, None, Summary)

"""The dashboard's contract: its page and the one summary its script polls."""

from __future__ import annotations

from msgspec import UNSET, UnsetType

from . import paths
from .base import Answer, Endpoint
from .cache import CacheFacts, StagingCopy
from .coordinator import TopFile
from .node import NodeInfo

__all__ = ["Failing", "Hits", "MemberRow", "NodeStaging", "PAGE", "STATIC", "SUMMARY", "Summary",
           "TopFilesPart", "Totals"]


class Totals(CacheFacts):
    """The cache nodes' facts summed over the pool."""

    cache_nodes: int


class MemberRow(Answer):
    """A pool member as the dashboard lists it (``health``: late once it missed two heartbeats)."""

    name: str
    url: str
    roles: list[str]
    version: str
    age: float
    started: float
    health: str
    cache: CacheFacts | None


class Failing(Answer):
    lfn: str | None
    attempts: int | None
    error: str | None
    permanent: bool | None


class NodeStaging(Answer):
    """One cache node's copies in flight and recent failures, or the ``error`` of asking it."""

    node: str
    error: str | UnsetType = UNSET
    active: list[StagingCopy] | UnsetType = UNSET
    queued: int | UnsetType = UNSET
    failed: int | UnsetType = UNSET
    failing: list[Failing] | UnsetType = UNSET


class TopFilesPart(Answer):
    """The first coordinator's top files, or the ``error`` of asking them."""

    coordinator: str | UnsetType = UNSET
    files: list[TopFile] | UnsetType = UNSET
    error: str | UnsetType = UNSET


class Hits(Answer):
    """Lookups the locators answered and how many found a holder."""

    looked_up: int
    held: int
    ratio: float | None


class Summary(Answer):
    """Pool members, cache usage, staging, hit ratio and top files in one answer; a part whose member did not
    answer is ``{"error": ...}``."""

    node: NodeInfo
    time: float
    heartbeat_interval: float
    expiry: float
    members: list[MemberRow]
    totals: Totals
    staging: list[NodeStaging]
    top_files: TopFilesPart
    hits: Hits | None


PAGE: Endpoint[str] = Endpoint("GET", paths.DASHBOARD_PAGE)  # HTML
STATIC: Endpoint[str] = Endpoint("GET", paths.DASHBOARD_STATIC)  # scripts and styles
SUMMARY = Endpoint("GET", paths.DASHBOARD_SUMMARY, None, Summary)

"""The locator's contract: holdings in (cache nodes), lookups out (submit agents, CLI, dashboard)."""

from __future__ import annotations

from typing import Annotated

from msgspec import UNSET, Meta, UnsetType

from . import paths
from .base import Answer, Body, Endpoint, Lfn, Name

__all__ = ["BASE", "FILE", "HOLDINGS", "HeldFile", "HeldSummary", "Holding", "HoldingsAnswer", "HoldingsRequest",
           "LOOKUP", "LocatorFacts", "LocatorNodes", "LookupAnswer", "LookupRequest", "NODES", "NodeShare"]

BASE = paths.LOCATOR


class LocatorFacts(Answer):
    """What a locator says of itself in its heartbeats (``info.locator``): the size of its index, and the LFNs
    looked up and found held since it started (the dashboard's hit ratio)."""

    files: int
    nodes: int
    looked_up: int
    held: int


class Holding(Body):
    lfn: Lfn
    size: Annotated[int, Meta(ge=0)]


class HoldingsRequest(Body):
    """A cache node's holdings: the complete list (``replace``) or a delta (``files`` added, ``removed``)."""

    node: Name
    files: list[Holding]
    replace: bool
    removed: list[Lfn] | UnsetType = UNSET

    example = {"node": "worker-07", "files": [{"lfn": "/store/demo/dataset1/events_001.root", "size": 22277}],
               "replace": False, "removed": ["/store/demo/dataset2/events_001.root"]}


class HoldingsAnswer(Answer):
    files: int


class LookupRequest(Body):
    lfns: list[str]

    example = {"lfns": ["/store/demo/dataset1/events_001.root", "/store/demo/dataset1/events_002.root"]}


class NodeShare(Answer):
    files: int
    bytes: int
    fraction: float


class LookupAnswer(Answer):
    """Holders of each LFN asked for, and each holder's share of their bytes."""

    files: dict[str, list[str]]
    nodes: dict[str, NodeShare]


class HeldFile(Answer):
    lfn: str
    nodes: dict[str, int]


class HeldSummary(Answer):
    files: int
    bytes: int
    updated: float


class LocatorNodes(Answer):
    nodes: dict[str, HeldSummary]


HOLDINGS = Endpoint("POST", paths.HOLDINGS, HoldingsRequest, HoldingsAnswer)
LOOKUP = Endpoint("POST", paths.LOOKUP, LookupRequest, LookupAnswer)
FILE = Endpoint("GET", paths.LOCATED, None, HeldFile)
NODES = Endpoint("GET", paths.HOLDERS, None, LocatorNodes)

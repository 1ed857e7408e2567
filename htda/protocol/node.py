"""Every node's own endpoints: identity, health, the pool and its heartbeats."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, TypeVar

import msgspec
from msgspec import Meta

from . import paths
from .base import Answer, Body, Endpoint, Name, ProtocolError, check_answer

__all__ = ["HEALTH", "HEARTBEAT", "Health", "Heartbeat", "HeartbeatAnswer", "LoopHealth", "METRICS", "MemberInfo",
           "NODE", "NodeInfo", "OPENAPI", "POOL", "PoolView", "facts_in", "member_facts"]

Role = Annotated[str, Meta(max_length=64)]


class Heartbeat(Body):
    """What a member sends to each seed: its identity and its components' small facts (``info``)."""

    name: Name
    url: Annotated[str, Meta(min_length=1, max_length=2048)]
    roles: Annotated[list[Role], Meta(max_length=32)]
    version: Annotated[str, Meta(max_length=64)]
    started: float
    info: dict[str, Any] = {}

    example = {"name": "worker-07", "url": "https://worker-07.example.org:8740", "roles": ["cache"],
               "version": "0.1.0", "started": 1795642700.0,
               "info": {"cache": {"capacity_bytes": 960_000_000_000, "free_bytes": 512_000_000_000,
                                  "used_bytes": 448_000_000_000, "files": 1873, "staging": 2}}}


class MemberInfo(Answer):
    """A pool member as a node sees it; ``age``: seconds since that node last heard from it; ``info``: what each
    of its components says of itself, by component."""

    name: str
    url: str
    roles: list[str]
    version: str
    started: float
    age: float
    info: dict[str, Any] = {}


class HeartbeatAnswer(Answer):
    """The seed's member list and its timing."""

    members: list[MemberInfo]
    interval: float
    expiry: float


class PoolView(Answer):
    self_: str = msgspec.field(name="self")
    members: list[MemberInfo]


class NodeInfo(Answer):
    name: str
    url: str
    roles: list[str]
    version: str
    started: float
    uptime: float


class LoopHealth(Answer):
    state: str
    detail: str
    last_ok_ago: float | None


class Health(Answer):
    """``status`` is ``ok`` or ``unhealthy`` (then HTTP 503, one line per loop in ``problems``)."""

    status: str
    name: str
    problems: list[str]
    loops: dict[str, LoopHealth]


HEARTBEAT = Endpoint("POST", paths.HEARTBEAT, Heartbeat, HeartbeatAnswer)
POOL = Endpoint("GET", paths.POOL, None, PoolView)
NODE = Endpoint("GET", paths.NODE, None, NodeInfo)
HEALTH = Endpoint("GET", paths.HEALTHZ, None, Health)
METRICS: Endpoint[str] = Endpoint("GET", paths.METRICS)  # Prometheus text, no JSON
OPENAPI = Endpoint("GET", paths.OPENAPI, None, dict[str, Any])


F = TypeVar("F")


def member_facts(member: Mapping[str, Any], component: str, kind: type[F]) -> F | None:
    """What ``member`` (a :class:`MemberInfo` as plain JSON) says of its ``component`` in its heartbeats
    (``info[component]``), as ``kind`` (e.g. :class:`~htda.protocol.cache.CacheFacts`); None if it says nothing,
    or nothing that fits (a member of another version)."""
    return facts_in(member.get("info") or {}, component, kind)


def facts_in(info: Mapping[str, Any], component: str, kind: type[F]) -> F | None:
    """:func:`member_facts` of a member's ``info`` (what the node runtime's members carry)."""
    facts = info.get(component)
    if facts is None:
        return None
    try:
        return check_answer(facts, kind)
    except ProtocolError:
        return None

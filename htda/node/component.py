"""The plugin interface every component (coordinator, locator, cache, ...) implements."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .config import Section

if TYPE_CHECKING:
    from .client import Client
    from .clock import Clock
    from .metrics import Registry
    from .periodic import Periodic
    from .pool import Member
    from .rest import Route

__all__ = ["Component", "NodeAPI"]


class NodeAPI(Protocol):
    """What a component may use of the node that loaded it; mypy holds every component to it."""

    name: str  # this node's pool name
    source: str  # the config file, to name in messages
    data_dir: Path  # where the node keeps its state
    metrics: "Registry"  # to register the component's metrics
    client: "Client"  # signed HTTP to other pool members
    clock: "Clock"  # the time components read (htda.node.clock): injected by tests

    @property
    def url(self) -> str:
        """The URL other members reach this node at."""

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between this node's heartbeats."""

    @property
    def member_expiry(self) -> float:
        """Seconds of silence after which a member leaves this node's view."""

    def path(self, value: str) -> Path:
        """A path from the config, relative to the config file's folder."""

    def members(self, role: str | None = None) -> list["Member"]:
        """Live pool members (this node included), optionally only those with ``role``."""

    def pool_snapshot(self) -> list[dict[str, Any]]:
        """The members as JSON, by name, with their ages."""

    def component(self, name: str) -> "Component | None":
        """Another component of this node, by name (None when it does not run here)."""

    def node_info(self) -> dict[str, Any]:
        """This node's identity, roles, version and uptime."""


class Component:
    """A part of a node, loaded by name from the ``htda.components`` entry points.

    Life cycle: ``__init__(node, config)`` (config is the validated section
    named after the component, e.g. ``[cache]``), ``routes()`` is mounted on
    the node's REST server, ``start()`` runs once the server listens,
    ``stop()`` on shutdown.  Pool events arrive through ``on_member_*``.
    Components must be stateless with respect to peers: anything learned from
    another node must come back after a restart through heartbeats and
    reports, never from local per-peer session state.
    """

    #: name used in ``[node] components`` and as the config section name
    name: ClassVar[str] = ""
    #: schema of the component's config section
    config_schema: ClassVar[Section] = Section()

    def __init__(self, node: NodeAPI, config: dict[str, Any]):
        self.node = node
        self.config = config
        self.log = logging.getLogger(f"htda.{self.name}")

    def routes(self) -> list["Route"]:
        """REST endpoints this component serves (under ``/api/v1/<name>/...``)."""
        return []

    def start(self) -> None:
        """Start background work (threads); the REST server is already up."""

    def stop(self) -> None:
        """Stop background work; must return within a few seconds."""

    def loops(self) -> list["Periodic"]:
        """The background loops this component runs: ``/healthz`` answers 503 when one is stale or failing."""
        return []

    def heartbeat_info(self) -> dict[str, Any]:
        """Small JSON-able facts sent with every heartbeat (e.g. cache capacity)."""
        return {}

    def serving(self) -> bool:
        """Whether the node offers this component's role to the pool now (a standby coordinator does not:
        the role appears in its heartbeats once it leads)."""
        return True

    def on_member_joined(self, member: "Member") -> None:
        """A node joined the pool (or restarted: its ``started`` changed)."""

    def on_member_left(self, member: "Member") -> None:
        """A node left the pool (missed its heartbeats for the expiry)."""


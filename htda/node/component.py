"""The plugin interface every component (coordinator, locator, cache, ...) implements."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from .config import Section

if TYPE_CHECKING:
    from .periodic import Periodic
    from .pool import Member
    from .rest import Route
    from .runtime import Node

__all__ = ["Component"]


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

    def __init__(self, node: "Node", config: dict[str, Any]):
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

    def on_member_joined(self, member: "Member") -> None:
        """A node joined the pool (or restarted: its ``started`` changed)."""

    def on_member_left(self, member: "Member") -> None:
        """A node left the pool (missed its heartbeats for the expiry)."""


"""The cache component: plugged into a node through the ``htda.components`` entry point."""

from __future__ import annotations

from ..node.component import Component
from ..node.config import Section


class CacheComponent(Component):
    """Shell of the cache; filled in by its own issue."""

    name = "cache"
    config_schema = Section({})

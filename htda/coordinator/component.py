"""The coordinator component: plugged into a node through the ``htda.components`` entry point."""

from __future__ import annotations

from ..node.component import Component
from ..node.config import Section


class CoordinatorComponent(Component):
    """Shell of the coordinator; filled in by its own issue."""

    name = "coordinator"
    config_schema = Section({})

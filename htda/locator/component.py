"""The locator component: plugged into a node through the ``htda.components`` entry point."""

from __future__ import annotations

from ..node.component import Component
from ..node.config import Section


class LocatorComponent(Component):
    """Shell of the locator; filled in by its own issue."""

    name = "locator"
    config_schema = Section({})

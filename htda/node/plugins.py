"""Finding plugins (components, backends, union drivers, rating policies) by name.

Plugins are entry points of the installed ``htda`` distribution (or any
other), grouped by kind: ``htda.components``, ``htda.storage``,
``htda.union``, ``htda.policies`` ...  A config names a plugin; this module
turns the name into its class, with an error that lists what exists.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

__all__ = ["PluginError", "available", "load"]


class PluginError(LookupError):
    """No plugin of that name, or it failed to import."""


@cache
def _group(group: str) -> dict[str, Any]:
    return {ep.name: ep for ep in entry_points(group=group)}


def available(group: str) -> list[str]:
    """Names of the plugins installed in ``group``."""
    return sorted(_group(group))


def load(group: str, name: str) -> Any:
    """The object the entry point ``name`` of ``group`` refers to."""
    ep = _group(group).get(name)
    if ep is None:
        known = ", ".join(available(group)) or "none installed"
        raise PluginError(f"no {group} plugin named '{name}' (available: {known})")
    try:
        return ep.load()
    except Exception as exc:  # noqa: BLE001 - report any import failure with the plugin's name
        raise PluginError(f"{group} plugin '{name}' failed to load: {exc}") from exc

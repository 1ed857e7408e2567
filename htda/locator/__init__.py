"""The locator component.

The component is imported on first use (``htda.locator.LocatorComponent``), so that importing one
module of the package (e.g. for the CLI or the simulator) does not load the whole component.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LocatorComponent"]


def __getattr__(name: str) -> Any:
    if name == "LocatorComponent":
        from .component import LocatorComponent

        return LocatorComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

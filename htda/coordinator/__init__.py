"""The coordinator component.

The component is imported on first use (``htda.coordinator.CoordinatorComponent``), so that importing one
module of the package (e.g. for the CLI or the simulator) does not load the whole component.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CoordinatorComponent"]


def __getattr__(name: str) -> Any:
    if name == "CoordinatorComponent":
        from .component import CoordinatorComponent

        return CoordinatorComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

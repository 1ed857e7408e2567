"""The cache node: backends, validated staging, allocation/eviction and the union view.

The component is imported on first use (``htda.cache.CacheComponent``), so that importing one
module of the package (e.g. for the CLI or the simulator) does not load the whole component.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CacheComponent"]


def __getattr__(name: str) -> Any:
    if name == "CacheComponent":
        from .component import CacheComponent

        return CacheComponent
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

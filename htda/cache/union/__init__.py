"""Union-view drivers: one namespace for jobs, cache copies first, storage behind them.

Drivers are plugins of the ``htda.union`` entry-point group:
``mergerfs`` (FUSE, the default), ``overlayfs`` (kernel) and ``symlink``
(a tree of links, no privileges).
"""

from __future__ import annotations

from .base import UnionDriver, UnionError, mount_type, unmount

__all__ = ["UnionDriver", "UnionError", "mount_type", "unmount"]

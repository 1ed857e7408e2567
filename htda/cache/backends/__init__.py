"""Storage and cache-device backends: small interfaces, plugins found by entry point.

Storage backends (group ``htda.storage``) are where files come from: POSIX
directories, XRootD servers, HTTP(S) servers.  Cache devices (group
``htda.cachedev``) are where copies are placed: a POSIX directory on a local
disk, and a logical device that spreads files over several of those like LVM.
"""

from __future__ import annotations

from .base import CacheDevice, FileStat, Sink, StorageBackend, StorageError, TemporaryCopy

__all__ = ["CacheDevice", "FileStat", "Sink", "StorageBackend", "StorageError", "TemporaryCopy"]

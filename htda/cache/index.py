"""The index of validated copies: what this node holds, on which device, checked against what.

It lives in memory and is rebuilt from the devices at start: each copy
carries its staging meta (source size, mtime, checksum) with it, so a copy
whose file no longer matches its meta, or whose source changed, is found and
dropped, while valid copies are kept without being fetched again.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .backends.base import CacheDevice, FileStat, HeldFile, StorageBackend, StorageError
from .checksum import checksum_fd

__all__ = ["Entry", "Index", "validate_found"]


@dataclass
class Entry:
    """One held, validated copy."""

    lfn: str
    device: CacheDevice
    size: int
    mtime: float
    checksum: str
    checksum_kind: str
    source: str
    staged_at: float
    source_url: str | None = None
    score: float = 0.0
    checked_at: float = 0.0
    #: monotonic time the view began serving this copy (0.0: before the node started, i.e. found at start-up)
    visible_since: float = 0.0

    @classmethod
    def from_meta(cls, device: CacheDevice, meta: dict[str, Any], checked_at: float) -> "Entry":
        """The entry of a copy with staging ``meta``, checked against its source at ``checked_at`` (wall clock)."""
        return cls(meta["lfn"], device, int(meta["size"]), float(meta["mtime"]), str(meta.get("checksum", "")),
                   str(meta.get("checksum_kind", "none")), str(meta.get("source", "")),
                   float(meta.get("staged_at", 0.0)), meta.get("source_url") or None, checked_at=checked_at)

    def to_json(self) -> dict[str, Any]:
        return {"lfn": self.lfn, "size": self.size, "mtime": self.mtime, "device": self.device.path,
                "checksum": self.checksum, "checksum_kind": self.checksum_kind, "score": self.score,
                "source": self.source, "staged_at": self.staged_at, "checked_at": self.checked_at}


class Index:
    """Thread-safe map LFN -> :class:`Entry`."""

    def __init__(self) -> None:
        self._entries: dict[str, Entry] = {}
        # guards _entries: staging threads add, the cycle and admin evictions remove, REST and metrics read;
        # an entry's fields (score, checked_at) are written by the cycle only
        self._lock = threading.Lock()

    def add(self, entry: Entry) -> None:
        with self._lock:
            self._entries[entry.lfn] = entry

    def remove(self, lfn: str) -> Entry | None:
        with self._lock:
            return self._entries.pop(lfn, None)

    def get(self, lfn: str) -> Entry | None:
        with self._lock:
            return self._entries.get(lfn)

    def served_at(self, lfn: str, when: float) -> bool:
        """Whether the view served ``lfn`` from its copy at monotonic time ``when`` (held, and visible by then)."""
        with self._lock:
            entry = self._entries.get(lfn)
            return entry is not None and entry.visible_since <= when

    def __contains__(self, lfn: str) -> bool:
        with self._lock:
            return lfn in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def entries(self) -> list[Entry]:
        with self._lock:
            return list(self._entries.values())

    def used_bytes(self, device: CacheDevice | None = None) -> int:
        with self._lock:
            return sum(e.size for e in self._entries.values() if device is None or e.device is device)

    def stalest(self, count: int) -> list[Entry]:
        """The ``count`` entries checked longest ago (for round-robin revalidation)."""
        with self._lock:
            return sorted(self._entries.values(), key=lambda e: e.checked_at)[:count]


def validate_found(found: HeldFile, device: CacheDevice, storage_for: Callable[[str], StorageBackend],
                   verify_checksum: bool, now: float) -> tuple[Entry | None, str]:
    """Check one copy found on disk; return ``(entry, "")`` if valid, ``(None, reason)`` if not.

    A source that cannot be reached right now does not condemn a copy whose
    own meta is intact: it is kept and re-checked by the running node.  ``now``
    (wall clock) is when a valid copy was checked.
    """
    meta = found.meta
    if not meta or meta.get("lfn") != found.lfn or "size" not in meta or "mtime" not in meta:
        return None, "no staging meta"
    entry = Entry.from_meta(device, meta, checked_at=now)
    recorded = FileStat(entry.size, entry.mtime)
    if not FileStat(found.size, found.mtime).same_as(recorded, mtime_slack=1e-6):
        return None, "size or mtime differ from the staging meta"
    try:
        storage = storage_for(found.lfn)
        if not storage.same_version(storage.stat(found.lfn), recorded):
            return None, "source changed"
        # the source's perms now: they may have changed while the node was down (or an older HTDA made the copy)
        device.set_ownership(found.lfn, storage.ownership(found.lfn))
    except FileNotFoundError:
        return None, "source gone"
    except (StorageError, OSError):
        entry.checked_at = 0.0  # unknown: first in line for the next revalidation
    if verify_checksum and entry.checksum and checksum_of(device, found.lfn, entry.checksum_kind) != entry.checksum:
        return None, "checksum mismatch"
    return entry, ""


def checksum_of(device: CacheDevice, lfn: str, kind: str) -> str:
    fd = device.open(lfn)
    try:
        return checksum_fd(fd, kind)
    finally:
        os.close(fd)

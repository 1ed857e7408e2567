"""Revalidation: copies are checked again against their source, a few per cycle, oldest check first.

A copy is kept while its file on the device still has the size and mtime it was staged with (and, within
the cycle's ``scrub_bytes_per_cycle``, its checksum) and its source still stats the same; it follows a
changed owner or mode of the source.  Otherwise it is evicted (and copied again if it is still wanted).
A source that cannot be reached now condemns nothing: the copy is checked again at a later cycle.

Threads: the ``htda-cache-cycle`` thread only (under the component's cycle lock); it alone writes the
entries' ``checked_at``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..node.clock import SYSTEM_CLOCK, Clock
from .backends.base import FileStat, StorageBackend, StorageError
from .index import Entry, Index, checksum_of

__all__ = ["Revalidator"]

log = logging.getLogger("htda.cache")


class Revalidator:
    """Checks copies of ``index`` again; ``evict(lfn, reason)`` drops a copy that fails (True if it did)."""

    def __init__(self, index: Index, storage_for: Callable[[str | None], StorageBackend],
                 evict: Callable[[str, str], bool], config: dict[str, Any], clock: Clock = SYSTEM_CLOCK):
        self.index, self.storage_for, self.evict, self.clock = index, storage_for, evict, clock
        self.interval = config["revalidate_interval"]
        self.per_cycle = config["revalidate_per_cycle"]
        self.scrub_bytes = config["scrub_bytes_per_cycle"]

    def some(self) -> int:
        """One cycle's share: up to ``revalidate_per_cycle`` copies checked ``revalidate_interval`` seconds ago
        or longer, their checksums too within ``scrub_bytes_per_cycle``; return how many were dropped."""
        budget = self.scrub_bytes
        horizon = self.clock.time() - self.interval
        dropped = 0
        for entry in self.index.stalest(self.per_cycle):
            if entry.checked_at > horizon:
                break
            scrub = entry.checksum and budget > 0 and entry.size <= max(budget, 1)
            if scrub:
                budget -= entry.size
            dropped += not self.check(entry, checksum=bool(scrub))
        return dropped

    def check(self, entry: Entry, checksum: bool) -> bool:
        """True if the copy is still good; otherwise it is evicted."""
        try:
            copy = entry.device.stat(entry.lfn)
            if not copy.same_as(FileStat(entry.size, entry.mtime), mtime_slack=1e-6):
                return not self.evict(entry.lfn, "copy altered on disk")
            if checksum and checksum_of(entry.device, entry.lfn, entry.checksum_kind) != entry.checksum:
                return not self.evict(entry.lfn, "checksum mismatch on disk")
        except FileNotFoundError:
            return not self.evict(entry.lfn, "copy vanished from disk")
        try:
            storage = self.storage_for(entry.source_url)
            source = storage.stat(entry.lfn)
            if not storage.same_version(source, FileStat(entry.size, entry.mtime)):
                return not self.evict(entry.lfn, "source changed")
            # the copy follows a changed owner or mode of the source (and of its directories)
            entry.device.set_ownership(entry.lfn, storage.ownership(entry.lfn))
        except FileNotFoundError:
            return not self.evict(entry.lfn, "source gone")
        except (StorageError, OSError, ValueError) as exc:
            log.info("cannot revalidate %s now: %s", entry.lfn, exc)
        entry.checked_at = self.clock.time()
        return True

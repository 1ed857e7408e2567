"""Input file sizes, read on the submit host from a local view of storage (an NFS or xrootdfs mount).

The coordinator places by bytes; without sizes it must assume ``unknown_size`` for
every file until a cache node has staged it.  When the submit host sees the storage,
the submit agent fills in each job's ``sizes`` from here before sending it on.
"""

from __future__ import annotations

import os
import stat
from collections import OrderedDict

from ..cache.confine import open_beneath
from ..node.clock import SYSTEM_CLOCK, Clock

__all__ = ["SizeProbe"]


class SizeProbe:
    """Sizes of LFNs under ``root``, remembered for ``ttl`` seconds (at most ``max_entries`` of them).

    Files are opened beneath ``root`` without following symbolic links out of it, so a
    link planted in storage reveals nothing of the rest of the host.
    """

    def __init__(self, root: str, ttl: float = 600.0, max_entries: int = 200_000, clock: Clock = SYSTEM_CLOCK):
        self.root, self.ttl, self.max_entries, self.clock = root, ttl, max_entries, clock
        self._known: OrderedDict[str, tuple[int, float]] = OrderedDict()

    def size(self, lfn: str) -> int | None:
        """The size of ``lfn`` in bytes, or ``None`` when it is not a regular file under the root."""
        now = self.clock.monotonic()
        known = self._known.get(lfn)
        if known is not None and now - known[1] < self.ttl:
            self._known.move_to_end(lfn)
            return known[0]
        try:
            fd = open_beneath(self.root, lfn, os.O_RDONLY | os.O_NONBLOCK)
        except (OSError, ValueError):
            return None
        try:
            info = os.fstat(fd)
        finally:
            os.close(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        self._known[lfn] = (info.st_size, now)
        self._known.move_to_end(lfn)
        while len(self._known) > self.max_entries:
            self._known.popitem(last=False)
        return info.st_size

    def annotate(self, jobs: list[dict]) -> None:
        """Add ``sizes`` to job records that carry none."""
        for job in jobs:
            if job.get("sizes"):
                continue
            sizes = {lfn: size for lfn in job.get("inputs", ()) if (size := self.size(lfn)) is not None}
            if sizes:
                job["sizes"] = sizes

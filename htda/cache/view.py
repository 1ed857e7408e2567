"""The union view jobs read through, as the cache service drives it.

The view is started once the index is rebuilt (so it never shows a copy found invalid), told of each copy
that lands or goes, and refreshed once per cycle (overlayfs remounts then); a view that failed to start
is tried again every :data:`VIEW_RETRY` seconds, and meanwhile nothing is asked of it: jobs read from
storage.  With ``report_reads``, fanotify watches it from the moment it starts (``on_open`` counts each
open a job makes).

Threads: the start and the cycle (start, refresh, removals), staging threads (additions), REST workers
(an admin's eviction): calls into the driver go one at a time under :attr:`View._lock`.  ``error`` and
``_tried`` are written by the start and the cycle only.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..node.clock import SYSTEM_CLOCK, Clock
from . import readers
from .union.base import UnionDriver, UnionError

__all__ = ["View", "VIEW_RETRY"]

log = logging.getLogger("htda.cache")

#: seconds between attempts to start a union view that failed to start
VIEW_RETRY = 60.0


class View:
    """Drives ``driver`` (None: this node has no view, and every call is a no-op)."""

    def __init__(self, driver: UnionDriver | None, report_reads: bool,
                 on_open: Callable[[str, int, float], None], clock: Clock = SYSTEM_CLOCK):
        self.driver, self.report_reads, self.on_open, self.clock = driver, report_reads, on_open, clock
        #: why the view is not available ("" while it is)
        self.error = ""
        self._tried = 0.0
        # one call into the driver at a time (start, refresh, added, removing, stop)
        self._lock = threading.RLock()

    def start(self, lfns: list[str]) -> None:
        """Start the view showing ``lfns`` (the copies held); on failure, log and remember why."""
        if self.driver is None:
            return
        self._tried = self.clock.monotonic()
        with self._lock:
            try:
                self.driver.start(lfns)
                self.error = ""
                if self.report_reads:
                    watch = readers.watch(self.driver, self.clock)  # now: fanotify sees only opens made after its marks
                    if watch is not None:
                        watch.on_open = self.on_open
            except (UnionError, OSError) as exc:
                self.error = str(exc)
                log.error("union view %s not available: %s (jobs must read from storage)", self.driver.view, exc)

    def refresh(self, lfns: Callable[[], list[str]]) -> None:
        """Once per cycle: let the view catch up with the cycle's changes; a view that failed to start is
        started again (showing ``lfns()``) once ``VIEW_RETRY`` seconds have passed."""
        if self.driver is None:
            return
        if self.error:
            if self.clock.monotonic() - self._tried >= VIEW_RETRY:
                self.start(lfns())
            return
        with self._lock:
            try:
                self.driver.refresh()
            except (UnionError, OSError) as exc:
                log.error("union view: refresh failed: %s", exc)

    def added(self, lfn: str) -> None:
        """A copy of ``lfn`` landed (renamed into place)."""
        self._call("added", lfn)

    def removing(self, lfn: str) -> None:
        """The copy of ``lfn`` is about to go: the view stops showing it first."""
        self._call("removing", lfn)

    def _call(self, what: str, lfn: str) -> None:
        if self.driver is None or self.error:
            return
        with self._lock:
            try:
                getattr(self.driver, what)(lfn)
            except (UnionError, OSError) as exc:
                log.error("union view: %s %s failed: %s", what, lfn, exc)

    def stop(self) -> None:
        if self.driver is None:
            return
        readers.unwatch(self.driver)
        if not self.error:
            with self._lock:
                self.driver.stop()

"""Read-ahead: a cache node reads files that jobs on its worker are about to read, before they start.

Where the worker reaches storage through a read-through cache of its own
(docs/cache.rst: an XRootD proxy file cache on loopback, in front of the
shared storage), a file read through it once is on the worker's disk for
every later read: the job's, and the cache node's own copy.  The submit agent
knows a job's inputs when it routes the job, and which node it sends a job
whose inputs no node holds to (its first-read home, :mod:`htda.condor.homes`);
the job itself starts seconds later (the schedd, a negotiation cycle, the
claim, the starter, the job's own start-up).  Reading the inputs ahead at the
home in that time puts the shared storage link to work while it would idle,
and the job then reads what has arrived from the worker's disk.  The read-
through cache fetches whole files once either way (its blocks cover what jobs
read), so reading ahead moves no more bytes over the storage link; without a
read-through cache it would read storage twice, so it is off unless the
cache's ``read_ahead`` is set.

Files are read one at a time, in the order asked (a job reads its inputs in
order), each at most once per ``recent`` seconds; a file this node holds or
is copying is skipped.  Nothing is kept: the bytes go to the read-through
cache, which is the point.
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from ..node.clock import SYSTEM_CLOCK, Clock
from ..node.periodic import Periodic
from .backends.base import StorageBackend, StorageError

__all__ = ["ReadAhead"]


class ReadAhead:
    """A queue of LFNs read through ``storage`` by one thread (``htda-read-ahead``), one file per pass.

    ``_lock`` guards ``_queue``, ``_queued`` and ``_recent`` (REST workers add, the thread takes)."""

    def __init__(self, storage: Callable[[], StorageBackend], busy: Callable[[str], bool], log: logging.Logger,
                 metrics: Any, *, limit: int = 1000, recent: float = 600.0, clock: Clock = SYSTEM_CLOCK):
        self.storage, self.busy, self.log, self.clock = storage, busy, log, clock
        self.limit, self.recent = limit, recent
        self._lock = threading.Lock()
        self._queue: collections.deque[str] = collections.deque()
        self._queued: set[str] = set()
        self._recent: dict[str, float] = {}  # lfn -> monotonic time it was last read ahead (or queued)
        self._loop = Periodic("htda-read-ahead", 5.0, self.read_next, log, clock=clock)
        self.m_files = metrics.counter("htda_cache_read_ahead_files_total", "files read ahead of the jobs that "
                                       "asked for them, by outcome (read, failed; skipped: held, copying, read "
                                       "lately or queue full)", ("outcome",))
        self.m_bytes = metrics.counter("htda_cache_read_ahead_bytes_total", "bytes read ahead through storage")
        metrics.gauge("htda_cache_read_ahead_queued", "files waiting to be read ahead", callback=self.queued)

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=5)

    def loops(self) -> list[Periodic]:
        return [self._loop]

    def queued(self) -> int:
        with self._lock:
            return len(self._queue)

    def ask(self, lfns: Iterable[str]) -> int:
        """Queue ``lfns`` (normalized) to be read ahead; the number queued (the rest are skipped)."""
        now, queued = self.clock.monotonic(), 0
        with self._lock:
            self._recent = {lfn: t for lfn, t in self._recent.items() if now - t < self.recent}
            for lfn in lfns:
                if lfn in self._queued or lfn in self._recent or len(self._queue) >= self.limit or self.busy(lfn):
                    self.m_files.inc(outcome="skipped")
                    continue
                self._queue.append(lfn)
                self._queued.add(lfn)
                self._recent[lfn] = now
                queued += 1
        if queued:
            self._loop.wake()
        return queued

    def read_next(self) -> None:
        """Read the next queued file to its end, bytes dropped; wake again while more wait."""
        with self._lock:
            if not self._queue:
                return
            lfn = self._queue.popleft()
            self._queued.discard(lfn)
            more = bool(self._queue)
        if self.busy(lfn):  # copied or being copied meanwhile: the copy reads it through the same cache
            self.m_files.inc(outcome="skipped")
        else:
            self._read(lfn)
        if more and not self._loop.stopping:
            self._loop.wake()

    def _read(self, lfn: str) -> None:
        read = 0

        def drop(chunk: memoryview) -> None:
            nonlocal read
            read += len(chunk)

        try:
            self.storage().read(lfn, drop)
        except (OSError, StorageError) as exc:  # a missing or unreadable file: the job will say so itself
            self.m_files.inc(outcome="failed")
            self.log.info("read-ahead of %s failed after %d bytes: %s", lfn, read, exc)
        else:
            self.m_files.inc(outcome="read")
            self.log.debug("read ahead %s (%d bytes)", lfn, read)
        finally:
            self.m_bytes.inc(read)

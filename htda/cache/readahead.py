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

Reading ahead fills the link's idle time; it does not take the link from
jobs.  While jobs on this worker read storage (``reading``: the files they
have open from it), only the inputs of those jobs are read ahead (a job's
inputs arrive as one list, so the node knows which files belong together):
the next file of a running job is fetched while the job works through the
one before.  The inputs of jobs not started yet wait, and are dropped after
``max_wait`` seconds (the job has started and reads them itself, or waits
for a slot and will).  Measured on the cluster benchmark (2026-11-28):
reading everything ahead at once took the first pass from 71 to 66 s, but
the inputs of jobs still waiting for a slot then shared the link with the
running jobs, whose walltimes grew by a tenth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..node.clock import SYSTEM_CLOCK, Clock
from ..node.periodic import Periodic
from .backends.base import StorageBackend, StorageError

__all__ = ["ReadAhead"]


@dataclass(frozen=True)
class _Item:
    lfn: str
    asked: float  # monotonic time
    job: frozenset[str]  # the inputs of the job it was asked for


class ReadAhead:
    """A queue of LFNs read through ``storage`` by one thread (``htda-read-ahead``), one file per pass.

    ``_lock`` guards ``_queue`` and ``_recent`` (REST workers add, the thread takes)."""

    def __init__(self, storage: Callable[[], StorageBackend], busy: Callable[[str], bool],
                 reading: Callable[[], Collection[str]], log: logging.Logger, metrics: Any, *, limit: int = 1000,
                 recent: float = 600.0, max_wait: float = 60.0, clock: Clock = SYSTEM_CLOCK):
        self.storage, self.busy, self.reading, self.log, self.clock = storage, busy, reading, log, clock
        if recent < max_wait:
            raise ValueError("recent must be at least max_wait: _recent also stands for the files queued")
        self.limit, self.recent, self.max_wait = limit, recent, max_wait
        self._lock = threading.Lock()
        self._queue: list[_Item] = []  # in the order asked
        # lfn -> monotonic time it was queued: every queued file is here (it leaves the queue within max_wait)
        self._recent: dict[str, float] = {}
        # every second: a pass that found jobs reading other files comes back soon
        self._loop = Periodic("htda-read-ahead", 1.0, self.read_next, log, clock=clock)
        self.m_files = metrics.counter("htda_cache_read_ahead_files_total", "files read ahead of the jobs that "
                                       "asked for them, by outcome (read, failed; skipped: held, copying, read "
                                       "lately or queue full; expired: waited max_wait while other jobs read)",
                                       ("outcome",))
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

    def ask(self, jobs: Iterable[Sequence[str]]) -> int:
        """Queue the inputs of ``jobs`` (each a job's normalized LFNs, in its order) to be read ahead; the number
        of files queued (the rest are skipped)."""
        now, queued = self.clock.monotonic(), 0
        with self._lock:
            self._recent = {lfn: t for lfn, t in self._recent.items() if now - t < self.recent}
            for inputs in jobs:
                job = frozenset(inputs)
                for lfn in inputs:
                    if lfn in self._recent or len(self._queue) >= self.limit or self.busy(lfn):
                        self.m_files.inc(outcome="skipped")
                        continue
                    self._queue.append(_Item(lfn, now, job))
                    self._recent[lfn] = now
                    queued += 1
        if queued:
            self._loop.wake()
        return queued

    def read_next(self) -> None:
        """Read the next file due to its end, bytes dropped; drop files that waited too long; wake again while
        more are due."""
        item = self._next_due()
        if item is None:
            return
        if self.busy(item.lfn):  # copied or being copied meanwhile: the copy reads it through the same cache
            self.m_files.inc(outcome="skipped")
        else:
            self._read(item.lfn)
        if not self._loop.stopping:
            self._loop.wake()

    def _next_due(self) -> _Item | None:
        """The first queued file, or while jobs here read storage the first of a reading job's inputs (taken
        off the queue); None when none is due."""
        now = self.clock.monotonic()
        reading = set(self.reading())
        with self._lock:
            fresh = [item for item in self._queue if now - item.asked <= self.max_wait]
            if len(fresh) < len(self._queue):
                self.m_files.inc(len(self._queue) - len(fresh), outcome="expired")
            self._queue = fresh
            due = next((i for i, item in enumerate(fresh) if not reading or item.job & reading), None)
            return None if due is None else self._queue.pop(due)

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

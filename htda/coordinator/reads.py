"""Files that jobs are reading from storage right now, as cache nodes see them; their staging waits.

Why: the first jobs of a new file group read it from storage, and the cache
node the group is placed on would copy the same files over the same shared
link at the same moment.  The jobs are the foreground (each holds a slot
while it waits for bytes); the copy serves only later jobs.  Copying a file
while a job streams it from storage sends it over the link twice at once and
slows the job down by the copy's share (on the cluster benchmark: a new
group's job took 2-3x longer).  So a file that a job reads from storage is
marked *deferred* in the assignments until the reading stops, and cache
nodes start its copy then.

Cache nodes report what jobs on their worker have open through the union
view and do not hold (``POST /api/v1/coordinator/reads``), with a time to
live; a report replaces that node's previous one.  A job opens its inputs one
after the other, so the coordinator defers with each file read the other
inputs of the latest job that named it (its job group): they are the files
that job reads next.  A file stays deferred at most ``max_defer`` seconds in
a row, so a long-running reader (or a stream of them) delays its copy, never
prevents it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

__all__ = ["StorageReads"]


class StorageReads:
    """Per node, the LFNs its jobs read from storage, each report valid until its ``ttl`` runs out."""

    def __init__(self, max_defer: float):
        self.max_defer = max_defer
        self._by_node: dict[str, tuple[float, frozenset[str], frozenset[str]]] = {}  # valid until, read, deferred
        self._since: dict[str, float] = {}  # lfn -> when its current run of reads was first reported
        self._lock = threading.Lock()

    def report(self, node: str, lfns: Iterable[str], ttl: float, now: float, next_inputs: Iterable[str] = ()) -> None:
        """Replace ``node``'s report: ``lfns`` are being read from storage there now, and the same jobs
        will read ``next_inputs`` next (both are deferred)."""
        read = frozenset(lfns)
        with self._lock:
            self._by_node[node] = (now + ttl, read, read | frozenset(next_inputs))
            self._expire(now)

    def forget(self, node: str) -> None:
        """A node left the pool: its jobs' reads no longer count."""
        with self._lock:
            self._by_node.pop(node, None)

    def _expire(self, now: float) -> set[str]:
        """Drop expired reports; return the files deferred now (and keep ``_since`` to exactly those)."""
        self._by_node = {n: r for n, r in self._by_node.items() if r[0] > now}
        reading: set[str] = set().union(*(deferred for _, _, deferred in self._by_node.values()))
        self._since = {lfn: self._since.get(lfn, now) for lfn in reading}
        return reading

    def deferred(self, now: float) -> set[str]:
        """Files whose staging should wait: read from storage now, and not yet for ``max_defer`` seconds."""
        with self._lock:
            self._expire(now)
            return {lfn for lfn, since in self._since.items() if now - since < self.max_defer}

    def snapshot(self, now: float) -> dict[str, list[str]]:
        """Per live report, the files read from storage (admin view)."""
        with self._lock:
            self._expire(now)
            return {node: sorted(read) for node, (_, read, _) in sorted(self._by_node.items())}

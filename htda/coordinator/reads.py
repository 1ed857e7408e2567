"""Files that jobs are reading from storage right now, as cache nodes see them; their first copy waits.

Why: the first job of a new file group reads it from storage, and the cache
node the group is placed on would copy the same files over the same shared
link at the same moment.  The job is the foreground (it holds a slot while
it waits for bytes); the copy serves only jobs that may come later.  Copying
a file while its only job streams it from storage sends it over the link
twice at once and slows that job down by the copy's share (on the cluster
benchmark a new group's job took 2-3x longer).  So while the latest job that
named a file is still the only job of its inputs, a report that the file is
being read from storage marks it, and the other inputs of that job (read
next), *deferred* in the assignments; cache nodes start the copies once the
reading stops.  A deferred file is placed on the node whose job reads it
(:meth:`StorageReads.readers`): nothing of it is copied yet, so moving costs
nothing, and where the worker reads storage through a read-through cache
(docs/cache.rst) the copy then takes most of its bytes from that worker's
own disk instead of the shared link.  Files that more than one job wanted are copied at once even
while jobs read them: later jobs are likely, and each of them gains.

Cache nodes report what jobs on their worker have open through the union
view and do not hold (``POST /api/v1/coordinator/reads``), with a time to
live; a report replaces that node's previous one.  A file stays deferred at
most ``max_defer`` seconds in a row, so a long-running reader delays its
copy, never prevents it.
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
        # guards _by_node and _since: reports and forgets come from REST workers and pool events, the cycle
        # and the assignments read them
        self._lock = threading.Lock()

    def report(self, node: str, lfns: Iterable[str], ttl: float, now: float, deferred: Iterable[str] | None = None
               ) -> None:
        """Replace ``node``'s report: ``lfns`` are being read from storage there now, and ``deferred`` (by
        default the same files) should not be copied meanwhile."""
        read = frozenset(lfns)
        with self._lock:
            self._by_node[node] = (now + ttl, read, read if deferred is None else frozenset(deferred))
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

    def readers(self, now: float) -> dict[str, str]:
        """``{lfn: node}`` for every file read from storage now: the node whose job reads it; of several
        nodes, the first by name."""
        with self._lock:
            self._expire(now)
            found: dict[str, str] = {}
            for node, (_, files, deferred) in sorted(self._by_node.items()):
                for lfn in files | deferred:  # deferred: also the job's inputs it will read next
                    found.setdefault(lfn, node)
            return found

    def snapshot(self, now: float) -> dict[str, list[str]]:
        """Per live report, the files read from storage (admin view)."""
        with self._lock:
            self._expire(now)
            return {node: sorted(read) for node, (_, read, _) in sorted(self._by_node.items())}

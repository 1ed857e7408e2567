"""First-read homes: one worker reads inputs that no cache node holds yet, for every job that names them.

Where workers reach storage through a read-through cache of their own
(``docs/cache.rst``), two jobs that read the same new file on two workers
fetch it twice over the storage link; on one worker they fetch it once, and
the coordinator's copy then follows that reader (``first_read_wait``).  The
submit agent therefore gives each input no node holds a *home*: the node a
job naming it is steered to, the same for every job that shares an input
while the home lasts.  A job whose inputs have no home yet goes to the cache
node with the fewest jobs routed to it and not yet finished (first those
steered to the copies it holds: they wait for its slots too), then the
fewest inputs given to it to read first lately, so that new data spreads
over the pool instead of queueing on one node.

Jobs before inputs: the storage link is shared by every worker, so a new
dataset costs the same storage reads wherever it is homed, but its jobs hold
that node's slots for the whole read.  Measured (the cluster benchmark, Zipf
skew 0.6, 2026-11-27): with homes chosen by recent inputs alone, pass 2's two
new datasets were both homed on the node that also held a third dataset of
the pass; five of twelve jobs queued for its two slots while the other
workers idled for 18 s.  A job counts from routing until its finished (or
removed) event, or until ``window`` (the agent's ``home_timeout``, after
which a waiting job is no longer held to its node) has passed without any
word of it; the lifecycle hooks' reports of a running job keep it counted.
With the shipped route, which edits jobs in place, no lifecycle hook reports
a start or an end (``docs/htcondor.rst``); the agent then reads the schedd's
queue of steered jobs every few seconds (:mod:`htda.condor.queue`,
:meth:`Homes.reconcile`), and without it a job counts for ``window`` after
its routing, so the load is the jobs routed to each node lately.

This is a preference for the first reads only: as soon as a node holds an
input, the locator's answer steers the job instead.

Every job waits for its home (with ``steer_requirements``, ``home_timeout``
long), also the first of its inputs: the agent cannot tell at routing
whether a second job of the same inputs follows.  Tried and measured (the
cluster benchmark, default workload): letting a job that shared no input
*when it was routed* start on any free slot sent the first job of several
shared datasets elsewhere while their later jobs waited for the home, so
those datasets were read twice: pass 1 moved 1.93 GB over the storage link
instead of 1.53, and ran at 0.81x XCache's rate instead of 1.0.
"""

from __future__ import annotations

import collections
import hashlib
import threading
from collections.abc import Iterable, Sequence

from ..node.clock import SYSTEM_CLOCK, Clock

__all__ = ["Homes"]


class Homes:
    """LFN -> home node, with the load of each node; thread-safe (``_lock`` guards all state)."""

    def __init__(self, *, ttl: float, window: float, limit: int = 200_000,
                 clock: Clock = SYSTEM_CLOCK):
        self.ttl = ttl  # seconds an input keeps its home after the last job that named it
        self.window = window  # seconds a job or a first read counts towards its node's load without news of it
        self.limit = limit  # most LFNs (and most jobs) remembered (the oldest go first)
        self.clock = clock
        self._lock = threading.Lock()
        self._homes: collections.OrderedDict[str, tuple[str, float]] = collections.OrderedDict()
        # (time, node) once per input given a home at that node (new to it): a node's load of first reads
        self._sent: collections.deque[tuple[float, str]] = collections.deque()
        # job id -> ({node: share of the job}, time its count lapses): jobs routed and not yet finished, in the
        # order of the last word of each; _queued sums their shares by node
        self._jobs: collections.OrderedDict[str, tuple[dict[str, float], float]] = collections.OrderedDict()
        self._queued: collections.Counter[str] = collections.Counter()

    def choose(self, lfns: Sequence[str], nodes: Iterable[str], job_id: str | None = None) -> str | None:
        """The home of a job reading ``lfns``, among the live cache nodes ``nodes``; None when there is none.

        The node that is home to most of the inputs wins (ties: the least loaded); without any, the least
        loaded node: the fewest unfinished jobs routed to it, then the fewest inputs homed there within
        ``window``, ties broken by a hash of the first input so that equal loads still spread.  Every input
        then has that home, for ``ttl`` from now; those it did not have before count towards the node's
        first reads, and the job ``job_id`` (if given) towards its jobs.
        """
        live = set(nodes)
        if not lfns or not live:
            return None
        now = self.clock.monotonic()
        with self._lock:
            load = self._load(now)
            votes: collections.Counter[str] = collections.Counter()
            for lfn in lfns:
                entry = self._homes.get(lfn)
                if entry is not None and entry[1] > now and entry[0] in live:
                    votes[entry[0]] += 1
            idle = (0.0, 0)
            if votes:
                home = min(votes, key=lambda node: (-votes[node], load.get(node, idle), node))
            else:
                home = min(live, key=lambda node: (load.get(node, idle), _spread(lfns[0], node)))
            for lfn in dict.fromkeys(lfns):
                before = self._homes.get(lfn)
                if before is None or before[0] != home or before[1] <= now:
                    self._sent.append((now, home))  # a read this node now has to do
                self._homes[lfn] = (home, now + self.ttl)
                self._homes.move_to_end(lfn)
            while len(self._homes) > self.limit:
                self._homes.popitem(last=False)
            if job_id is not None:
                self._count(job_id, {home: 1.0}, now)
        return home

    def routed(self, job_id: str, nodes: Sequence[str]) -> None:
        """The job ``job_id`` was steered to the copies on ``nodes``: it waits for their slots (a share each)."""
        if nodes:
            with self._lock:
                self._count(job_id, dict.fromkeys(nodes, 1.0 / len(nodes)), self.clock.monotonic())

    def job_event(self, job_id: str, state: str | None, node: str | None) -> None:
        """A lifecycle hook's word of a job: started (on ``node``) moves its count there, finished or removed
        ends it, any other keeps it counted."""
        now = self.clock.monotonic()
        with self._lock:
            if state in ("finished", "removed"):
                self._forget(job_id)
            elif state == "started" and node:
                self._count(job_id, {node: 1.0}, now)
            elif job_id in self._jobs:
                self._count(job_id, self._jobs[job_id][0], now)

    def reconcile(self, queue: dict[str, dict[str, float]], asked_at: float) -> None:
        """The schedd's queue of steered jobs, read from ``asked_at`` (monotonic) on (:mod:`htda.condor.queue`):
        its jobs count as it says, a counted job it does not hold has ended, unless the agent heard of it after
        ``asked_at`` (routed while the queue was read)."""
        now = self.clock.monotonic()
        with self._lock:
            for job_id, (_, lapse) in list(self._jobs.items()):
                if job_id not in queue and lapse - self.window < asked_at:
                    self._forget(job_id)
            for job_id, shares in queue.items():
                if job_id in self._jobs or len(self._jobs) < self.limit:
                    self._count(job_id, shares, now)

    def _count(self, job_id: str, shares: dict[str, float], now: float) -> None:
        self._forget(job_id)
        self._jobs[job_id] = (shares, now + self.window)
        self._queued.update(shares)
        while len(self._jobs) > self.limit:
            self._forget(next(iter(self._jobs)))

    def _forget(self, job_id: str) -> None:
        shares, _ = self._jobs.pop(job_id, ({}, 0.0))
        self._queued.subtract(shares)
        for node in shares:
            if self._queued[node] < 1e-9:  # shares of 1/k do not always add back to exactly 0
                del self._queued[node]

    def _load(self, now: float) -> dict[str, tuple[float, int]]:
        """node -> (unfinished jobs, first reads within ``window``); a node with neither is missing."""
        while self._sent and self._sent[0][0] <= now - self.window:
            self._sent.popleft()
        self._lapse(now)
        reads = collections.Counter(node for _, node in self._sent)
        return {node: (self._queued[node], reads[node]) for node in self._queued.keys() | reads.keys()}

    def _lapse(self, now: float) -> None:
        # _jobs is in the order of the last word of each job, so the lapsed ones are at its front
        while self._jobs and next(iter(self._jobs.values()))[1] <= now:
            self._forget(next(iter(self._jobs)))

    def jobs(self) -> int:
        """Jobs counted now (routed, not yet finished)."""
        with self._lock:
            self._lapse(self.clock.monotonic())
            return len(self._jobs)

    def __len__(self) -> int:
        with self._lock:
            return len(self._homes)


def _spread(lfn: str, node: str) -> bytes:
    """Rendezvous order of ``node`` for ``lfn``: stable across agents, different per LFN."""
    return hashlib.blake2b(f"{node}\0{lfn}".encode(), digest_size=8).digest()

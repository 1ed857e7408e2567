"""HTDA as the real pool runs it: the coordinator's rating *and placement*, in work cycles, over N nodes.

Where :class:`~.htda_policy.HTDAPolicy` is a demand-fetched cache (a miss
stages the file at once), this policy replays what the pool does:

- every request records an access of its group in the coordinator's
  :class:`~htda.coordinator.rating.RatingPolicy` (one per job and group, as in
  :class:`~.htda_policy.HTDAPolicy`) and is a hit only if the file is placed
  on some node at that moment;
- every ``cycle`` seconds of trace time, the best groups (by the rating's
  keys, enough of them to fill twice the pool's capacity) become
  :class:`~htda.coordinator.placement.GroupCandidate` objects and the
  coordinator's :func:`~htda.coordinator.placement.place` computes the new
  placement from the previous one (hysteresis included); files that appear in
  it are staged, files that leave it (or move) are evicted;
- an adaptive rating (``lrfu-adaptive``) is driven as the coordinator drives
  it: its miniature caches hold as many groups as the placement does (set
  after every cycle; the accesses carry no sizes), and the placement follows
  its layout (:func:`~htda.coordinator.adaptive.placement_admission`, a
  placed file rated by the group it was first requested in).

Placement stages a group's files before they are read (that is what the
group rule is for), so this is *not* a demand-fetched cache and the offline
bounds of :mod:`.offline`, which bound demand-fetched caches, do not bound it.
"""

from __future__ import annotations

import heapq
from operator import itemgetter

from ..coordinator.adaptive import AdaptiveLRFUPolicy, placement_admission
from ..coordinator.placement import GroupCandidate, place
from ..coordinator.rating import RatingPolicy
from .policies import CachePolicy
from .trace import NO_GROUP

__all__ = ["PlacedHTDAPolicy"]


class PlacedHTDAPolicy(CachePolicy):
    """``nodes`` cache nodes of ``capacity / nodes`` bytes, filled by the coordinator's placement each cycle."""

    name = "htda-placed"

    def __init__(self, capacity: int, rating: RatingPolicy[int], nodes: int = 1, cycle: float = 300.0,
                 hysteresis: float = 2.0, label: str | None = None, accesses: str = "job"):
        super().__init__(capacity, label)
        if not cycle > 0:
            raise ValueError("cycle must be > 0 seconds")
        self.rating = rating
        # an adaptive rating, driven as the coordinator drives it (see the module docstring), or None
        self._adaptive = rating if isinstance(rating, AdaptiveLRFUPolicy) else None
        self.cycle = float(cycle)
        self.hysteresis = hysteresis
        self.per_job = accesses == "job"
        self.capacities = {f"node{i}": capacity // nodes for i in range(nodes)}
        self._files: dict[int, dict[int, None]] = {}  # group -> its files, in order of first request
        self._sizes: dict[int, int] = {}
        self._last_access: dict[int, float] = {}
        self._where: dict[int, str] = {}  # the current placement: file -> node
        self._group_of: dict[int, int] = {}  # file -> the group it was first requested in
        self._next_cycle: float | None = None
        self._accessed = False
        self.cycles = 0

    def replay(self, times, ids, sizes, groups):
        files, known_sizes, last_access, where = self._files, self._sizes, self._last_access, self._where
        access = self.rating.access
        hits = hit_bytes = 0
        for t, oid, size, group in zip(times, ids, sizes, groups):
            if self._next_cycle is None:
                self._next_cycle = t + self.cycle
            elif t >= self._next_cycle:
                self._run_cycle(t)
                where = self._where
            if oid in where:
                hits += 1
                hit_bytes += size
            if group == NO_GROUP:
                group = -2 - oid
            members = files.get(group)
            if members is None:
                members = files[group] = {}
            members[oid] = None
            self._group_of.setdefault(oid, group)
            known_sizes[oid] = size
            if not self.per_job or last_access.get(group) != t:
                last_access[group] = t
                access(group, t)
                self._accessed = True
        self.rating.clear_touched()  # (the coordinator's incremental bookkeeping)
        return hits, hit_bytes

    def _candidates(self, now: float) -> list[GroupCandidate[int]]:
        """The best groups, until their files would fill the pool twice (room for the hysteresis to choose)."""
        keys, budget = self.rating.keys(), 2 * self.capacity
        want = 64
        while True:
            chosen: list[GroupCandidate[int]] = []
            total = 0
            for group, key in heapq.nlargest(want, keys.items(), key=itemgetter(1)):
                members = tuple(self._files.get(group, ()))
                chosen.append(GroupCandidate(group, self.rating.score_of_key(key, now), members))
                total += sum(self._sizes[f] for f in members)
                if total >= budget:
                    return chosen
            if want >= len(keys):
                return chosen
            want *= 4  # not enough bytes among the best ``want`` groups: look deeper

    def bytes_per_node(self) -> dict[str, int]:
        """Bytes each node holds in the current placement."""
        held: dict[str, int] = {}
        for oid, node in self._where.items():
            held[node] = held.get(node, 0) + self._sizes[oid]
        return held

    def _run_cycle(self, now: float) -> None:
        if not self._accessed:
            new = self._where  # no access since the last cycle: the placement is stable (placement's contract)
        else:
            options = {} if self._adaptive is None else placement_admission(self._adaptive, self._group_of.get)
            new = place(self._candidates(now), self._sizes, self.capacities, self._where, hysteresis=self.hysteresis,
                        **options)
        self._accessed = False
        old, sizes = self._where, self._sizes
        self.staged += sum(sizes[f] for f, node in new.items() if old.get(f) != node)
        self.evicted += sum(sizes[f] for f, node in old.items() if new.get(f) != node)
        self.used = sum(sizes[f] for f in new)
        self._where = new
        if self._adaptive is not None:  # its shadows count the groups placed, as the coordinator's do
            self._adaptive.set_capacity(len({self._group_of[f] for f in new}))
        self.cycles += 1
        next_cycle = self._next_cycle
        assert next_cycle is not None  # replay() sets it before it runs the first cycle
        while next_cycle <= now:
            next_cycle += self.cycle
        self._next_cycle = next_cycle

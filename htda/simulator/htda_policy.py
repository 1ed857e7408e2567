"""HTDA's own policy in the simulator: the coordinator's rating (a :class:`RatingPolicy` plugin) with
the group max rule, driving evictions of a demand-fetched cache.

The rating is not re-implemented here: every access is recorded with the
coordinator's ``RatingPolicy.access`` and every comparison uses its
time-invariant ``key`` (``htda.coordinator.rating``), combined with the
coordinator's :func:`best_key` (group max rule) and, optionally,
:func:`normalised_key` (score per byte).  What this module adds is only the
cache around them:

- The group of a request is its ``group_id`` (a dataset, a task); a request
  without one is its own group.  A file's key is the best key of the groups
  it was requested in.
- Like the coordinator, which records one access per *job* and group, the
  requests of one group at one timestamp (one job reading several files) are
  one access (``accesses="job"``); ``accesses="request"`` counts every row.
- On a miss the file is staged, and files are evicted lowest key first until
  the cache fits; the staged file itself may be the lowest, then it is not
  kept (a score-based admission).  Equal keys (files of one group) are
  broken by object id, so a group too large for the room it gets keeps a
  stable part of itself instead of cycling through it.
- Keys only grow, so the eviction heap is lazy: an entry whose key went stale
  is re-pushed with the current key when it reaches the top, never on access.
"""

from __future__ import annotations

import heapq

from ..coordinator.rating import RatingPolicy, best_key, normalised_key
from .policies import CachePolicy
from .trace import NO_GROUP

__all__ = ["HTDAPolicy", "ACCESS_MODES"]

ACCESS_MODES = ("job", "request")


class HTDAPolicy(CachePolicy):
    """A cache evicting by the coordinator's rating of file groups (see the module docstring)."""

    name = "htda"

    def __init__(self, capacity: int, rating: RatingPolicy[int], label: str | None = None, per_size: bool = False,
                 accesses: str = "job"):
        if accesses not in ACCESS_MODES:
            raise ValueError(f"accesses must be one of {', '.join(ACCESS_MODES)}")
        super().__init__(capacity, label)
        self.rating = rating
        self.per_size = per_size
        self.accesses = accesses
        self._group_of: dict[int, int] = {}  # file -> the group it was first requested in
        self._more_groups: dict[int, set[int]] = {}  # file -> all its groups, for files in several groups
        self._last_access: dict[int, float] = {}  # group -> time of its last recorded access
        self._entry_key: dict[int, float] = {}  # cached file -> key of its one live heap entry
        self._sizes: dict[int, int] = {}  # cached file -> size
        self._heap: list[tuple[float, int]] = []

    def file_key(self, oid: int) -> float:
        """The file's current key: the best of its groups' keys (per byte if ``per_size``)."""
        groups = self._more_groups.get(oid)
        key = self.rating.key(self._group_of[oid]) if groups is None else best_key(map(self.rating.key, groups))
        return normalised_key(key, self._sizes.get(oid)) if self.per_size else key

    def replay(self, times, ids, sizes, groups):
        rating, group_of, more_groups, last_access = self.rating, self._group_of, self._more_groups, self._last_access
        entry_key, cached_sizes, heap, cap, used = self._entry_key, self._sizes, self._heap, self.capacity, self.used
        access, file_key, keys = rating.access, self.file_key, rating.keys()
        push, pop = heapq.heappush, heapq.heappop
        per_job = self.accesses == "job"
        # Fast path: a file of one group, not rated per size, has its group's key, read straight from the
        # rating's key table (its public read-only view) instead of through two method calls.  Every group read
        # there was accessed first, so it has a key.
        fast = not self.per_size
        hits = hit_bytes = staged = evicted = 0
        for t, oid, size, group in zip(times, ids, sizes, groups):
            if group == NO_GROUP:
                group = -2 - oid  # a file without a group is its own group; ids never collide
            known = group_of.setdefault(oid, group)
            if known != group:
                more_groups.setdefault(oid, {known}).add(group)
            if not per_job or last_access.get(group) != t:
                last_access[group] = t
                access(group, t)
            if oid in entry_key:
                hits += 1
                hit_bytes += size
                continue
            if size > cap:
                continue
            cached_sizes[oid] = size
            key = entry_key[oid] = keys[group] if fast and known == group and oid not in more_groups \
                else file_key(oid)
            push(heap, (key, oid))
            used += size
            while used > cap:
                key, victim = pop(heap)
                if fast and victim not in more_groups:
                    current = keys[group_of[victim]]
                else:
                    current = file_key(victim)
                if current != key:  # the group was accessed since this entry was pushed
                    entry_key[victim] = current
                    push(heap, (current, victim))
                    continue
                del entry_key[victim]
                victim_size = cached_sizes.pop(victim)
                used -= victim_size
                if victim == oid:
                    size = 0  # not admitted: nothing staged, nothing evicted
                else:
                    evicted += victim_size
            staged += size
        rating.take_touched()  # the coordinator's incremental bookkeeping; the simulator does not need it
        self.used = used
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes

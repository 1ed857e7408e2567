"""Cache replacement policies replayed by the simulator: the common interface and the classic baselines.

Every policy models a demand-fetched cache of ``capacity`` bytes: a request
for a cached object is a hit; a miss reads the object from storage and the
policy decides whether to keep it (an object larger than the cache is never
kept) and what to evict to make room.  Policies count the bytes they stage
into and evict from the cache (churn).

The loops are deliberately written inline, with local variables and no
per-request method calls: they are the simulator's hot path.
"""

from __future__ import annotations

import heapq
from abc import ABC, abstractmethod
from collections import OrderedDict

__all__ = ["ARCPolicy", "CachePolicy", "LFUPolicy", "LRUPolicy"]


class CachePolicy(ABC):
    """A cache of ``capacity`` bytes that serves a stream of requests and counts its churn."""

    #: short name used in tables and on the command line
    name = ""
    #: offline policies need the index of each request's next use (see :mod:`.offline`)
    needs_future = False
    #: :meth:`replay` also takes the chunk's numpy arrays (a compiled loop reads them in place); the others get lists
    takes_arrays = False

    def __init__(self, capacity: int, label: str | None = None):
        if capacity < 0:
            raise ValueError("cache capacity must be >= 0 bytes")
        self.capacity = int(capacity)
        self.label = label or self.name
        self.used = 0
        self.staged = 0
        self.evicted = 0

    @abstractmethod
    def replay(self, times: list[float], ids: list[int], sizes: list[int], groups: list[int]) -> tuple[int, int]:
        """Serve the requests in order (lists, or the chunk's arrays if :attr:`takes_arrays`); return
        ``(hits, hit_bytes)``."""

    def finish(self) -> None:
        """Called once after the last request (policies that batch work flush it here)."""
        return None

    #: what :meth:`release` keeps: the label and the totals
    KEPT_AFTER_RELEASE = frozenset({"capacity", "label", "used", "staged", "evicted"})

    def release(self) -> None:
        """Drop the replay's tables once it is over and its totals taken; the policy replays nothing after.
        ``simulate`` has the engine call it (:func:`~.engine.replay`'s ``release``): replaying each policy alone
        in turn, a run of many policies then holds one policy's tables at a time instead of all of them (on a
        trace of millions of objects, hundreds of MB to GBs each).  Every attribute but
        :data:`KEPT_AFTER_RELEASE` goes, so that a released policy used again fails at once instead of
        replaying from empty tables."""
        for name in [name for name in vars(self) if name not in self.KEPT_AFTER_RELEASE]:
            delattr(self, name)


class LRUPolicy(CachePolicy):
    """Least Recently Used: evict the object whose last request is oldest."""

    name = "lru"

    def __init__(self, capacity: int, label: str | None = None):
        super().__init__(capacity, label)
        self._cache: OrderedDict[int, int] = OrderedDict()

    def replay(self, times, ids, sizes, groups):
        cache, cap, used = self._cache, self.capacity, self.used
        touch, pop_oldest = cache.move_to_end, cache.popitem
        hits = hit_bytes = staged = evicted = 0
        for oid, size in zip(ids, sizes):
            if oid in cache:
                touch(oid)
                hits += 1
                hit_bytes += size
            elif size <= cap:
                cache[oid] = size
                used += size
                staged += size
                while used > cap:
                    victim_size = pop_oldest(last=False)[1]
                    used -= victim_size
                    evicted += victim_size
        self.used = used
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes


class LFUPolicy(CachePolicy):
    """In-cache Least Frequently Used: evict the object with the fewest requests since it was
    staged; ties go to the least recently used.  A new object enters with count 1, and its
    count is forgotten when it is evicted (the textbook LFU, without aging).
    """

    name = "lfu"

    def __init__(self, capacity: int, label: str | None = None):
        super().__init__(capacity, label)
        self._entry: dict[int, tuple[int, int, int]] = {}  # oid -> its live heap entry (count, seq, oid)
        self._heap: list[tuple[int, int, int]] = []
        self._sizes: dict[int, int] = {}
        self._seq = 0

    def replay(self, times, ids, sizes, groups):
        entry, heap, cached_sizes, cap, used = self._entry, self._heap, self._sizes, self.capacity, self.used
        push, pop = heapq.heappush, heapq.heappop
        seq = self._seq
        hits = hit_bytes = staged = evicted = 0
        for oid, size in zip(ids, sizes):
            seq += 1
            old = entry.get(oid)
            if old is not None:
                hits += 1
                hit_bytes += size
                new = entry[oid] = (old[0] + 1, seq, oid)
                push(heap, new)  # the old entry stays behind, dead: entry[] no longer points to it
                continue
            if size > cap:
                continue
            while used + size > cap:  # the victims are chosen among the cached objects, then the new one enters
                victim = pop(heap)
                if entry.get(victim[2]) is not victim:
                    continue
                del entry[victim[2]]
                victim_size = cached_sizes.pop(victim[2])
                used -= victim_size
                evicted += victim_size
            new = entry[oid] = (1, seq, oid)
            push(heap, new)
            cached_sizes[oid] = size
            used += size
            staged += size
            if len(heap) > 4 * len(entry) + 1024:
                heap[:] = list(entry.values())  # drop dead entries so memory stays bounded
                heapq.heapify(heap)
        self._seq, self.used = seq, used
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes


class ARCPolicy(CachePolicy):
    """Adaptive Replacement Cache (Megiddo & Modha, FAST 2003), measured in bytes.

    ``T1`` holds objects requested once recently, ``T2`` those requested at
    least twice; the ghost lists ``B1``/``B2`` remember what was evicted from
    each.  A hit in a ghost list moves the target size ``p`` of ``T1``
    towards the list that would have hit.  Sizes replace page counts
    everywhere (the usual variable-size adaptation): ``p``, the list lengths
    and the ghost budgets are byte counts, and a ghost hit moves ``p`` by the
    object's size times the ratio of the ghost lists' sizes.
    """

    name = "arc"

    def __init__(self, capacity: int, label: str | None = None):
        super().__init__(capacity, label)
        self.t1: OrderedDict[int, int] = OrderedDict()
        self.t2: OrderedDict[int, int] = OrderedDict()
        self.b1: OrderedDict[int, int] = OrderedDict()
        self.b2: OrderedDict[int, int] = OrderedDict()
        self.t1_bytes = self.t2_bytes = self.b1_bytes = self.b2_bytes = 0
        self.p = 0.0

    def replay(self, times, ids, sizes, groups):
        t1, t2, b1, b2, cap = self.t1, self.t2, self.b1, self.b2, self.capacity
        hits = hit_bytes = 0
        for oid, size in zip(ids, sizes):
            if oid in t1:
                del t1[oid]
                t2[oid] = size
                self.t1_bytes -= size
                self.t2_bytes += size
                hits += 1
                hit_bytes += size
            elif oid in t2:
                t2.move_to_end(oid)
                hits += 1
                hit_bytes += size
            elif size > cap:
                continue
            elif oid in b1:
                self.p = min(float(cap), self.p + size * max(1.0, self.b2_bytes / max(self.b1_bytes, 1)))
                self.b1_bytes -= b1.pop(oid)
                self._make_room(size, in_b2=False)
                self._admit(t2, oid, size, second=True)
            elif oid in b2:
                self.p = max(0.0, self.p - size * max(1.0, self.b1_bytes / max(self.b2_bytes, 1)))
                self.b2_bytes -= b2.pop(oid)
                self._make_room(size, in_b2=True)
                self._admit(t2, oid, size, second=True)
            else:
                self._make_room(size, in_b2=False)
                self._admit(t1, oid, size, second=False)
                self._trim_ghosts()
        return hits, hit_bytes

    def _admit(self, target: OrderedDict, oid: int, size: int, second: bool) -> None:
        target[oid] = size
        if second:
            self.t2_bytes += size
        else:
            self.t1_bytes += size
        self.used += size
        self.staged += size

    def _make_room(self, size: int, in_b2: bool) -> None:
        """ARC's REPLACE, repeated until ``size`` more bytes fit."""
        while self.t1_bytes + self.t2_bytes + size > self.capacity:
            if self.t1 and (self.t1_bytes > self.p or (in_b2 and self.t1_bytes >= self.p) or not self.t2):
                oid, victim = self.t1.popitem(last=False)
                self.t1_bytes -= victim
                self.b1[oid] = victim
                self.b1_bytes += victim
            else:
                oid, victim = self.t2.popitem(last=False)
                self.t2_bytes -= victim
                self.b2[oid] = victim
                self.b2_bytes += victim
            self.used -= victim
            self.evicted += victim

    def _trim_ghosts(self) -> None:
        """Keep |T1|+|B1| <= c and |T1|+|T2|+|B1|+|B2| <= 2c, in bytes."""
        cap = self.capacity
        while self.b1 and self.t1_bytes + self.b1_bytes > cap:
            self.b1_bytes -= self.b1.popitem(last=False)[1]
        while self.b2 and self.t1_bytes + self.t2_bytes + self.b1_bytes + self.b2_bytes > 2 * cap:
            self.b2_bytes -= self.b2.popitem(last=False)[1]

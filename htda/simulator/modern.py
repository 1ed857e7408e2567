"""The modern baselines practitioners reach for today: S3-FIFO and W-TinyLFU, measured in bytes.

Both keep popular objects by filtering what enters the main cache, which is
where recency-only policies (LRU) and slow-adapting ones (LFU) lose on
traces with many one-hit wonders.  HTDA is compared against them in the
simulator, so they follow their published designs closely; where the papers
count objects, these count bytes (the caches hold files of very different
sizes), as their authors' own simulators do for sized traces.
"""

from __future__ import annotations

from collections import OrderedDict

from .policies import CachePolicy

__all__ = ["S3FIFOPolicy", "WTinyLFUPolicy"]


class S3FIFOPolicy(CachePolicy):
    """S3-FIFO (Yang et al., "FIFO queues are all you need for cache eviction", SOSP 2023).

    A small FIFO ``S`` (10 % of the bytes) takes new objects; when it is
    full, its oldest object moves to the main FIFO ``M`` if it was requested
    again while in ``S``, else it leaves, its id kept in the ghost FIFO
    ``G`` (as many bytes of ids as ``M`` holds).  A missed object found in
    ``G`` goes straight to ``M``.  ``M`` evicts as a 2-bit CLOCK: an object
    requested since it was last examined goes back to the head with its
    count decremented (counts saturate at 3).
    """

    name = "s3fifo"
    small_share = 0.10
    max_freq = 3

    def __init__(self, capacity: int, label: str | None = None):
        super().__init__(capacity, label)
        self.small: OrderedDict[int, int] = OrderedDict()  # oid -> size; first item is the oldest
        self.main: OrderedDict[int, int] = OrderedDict()
        self.ghost: OrderedDict[int, int] = OrderedDict()
        self.freq: dict[int, int] = {}  # of cached objects, 0..max_freq
        self.small_bytes = self.main_bytes = self.ghost_bytes = 0

    def replay(self, times, ids, sizes, groups):
        freq, cap, top = self.freq, self.capacity, self.max_freq
        hits = hit_bytes = 0
        for oid, size in zip(ids, sizes):
            count = freq.get(oid)
            if count is not None:
                hits += 1
                hit_bytes += size
                if count < top:
                    freq[oid] = count + 1
                continue
            if size > cap:
                continue
            while self.small_bytes + self.main_bytes + size > cap:
                self._evict()
            ghost_size = self.ghost.pop(oid, None)
            if ghost_size is not None:
                self.ghost_bytes -= ghost_size
                self.main[oid] = size
                self.main_bytes += size
            else:
                self.small[oid] = size
                self.small_bytes += size
            freq[oid] = 0
            self.used += size
            self.staged += size
        return hits, hit_bytes

    def _evict(self) -> None:
        if self.small and (self.small_bytes >= self.small_share * self.capacity or not self.main):
            self._evict_small()
        else:
            self._evict_main()

    def _evict_small(self) -> None:
        """Move the oldest objects of S that were requested again into M, until one leaves the cache."""
        while self.small:
            oid, size = self.small.popitem(last=False)
            self.small_bytes -= size
            if self.freq[oid] > 0:
                self.freq[oid] = 0
                self.main[oid] = size
                self.main_bytes += size
                if self.main_bytes > (1 - self.small_share) * self.capacity:
                    self._evict_main()
                    return
            else:
                self._drop(oid, size)
                self.ghost[oid] = size
                self.ghost_bytes += size
                while self.ghost_bytes > (1 - self.small_share) * self.capacity:
                    self.ghost_bytes -= self.ghost.popitem(last=False)[1]
                return

    def _evict_main(self) -> None:
        while self.main:
            oid, size = self.main.popitem(last=False)
            count = self.freq[oid]
            if count > 0:
                self.freq[oid] = count - 1
                self.main[oid] = size
            else:
                self.main_bytes -= size
                self._drop(oid, size)
                return

    def _drop(self, oid: int, size: int) -> None:
        del self.freq[oid]
        self.used -= size
        self.evicted += size


class WTinyLFUPolicy(CachePolicy):
    """W-TinyLFU (Einziger, Friedman & Manes, "TinyLFU: A Highly Efficient Cache Admission Policy",
    ACM TOS 2017), laid out as in Caffeine.

    New objects enter a small LRU *window* (1 % of the bytes).  The
    window's LRU victim is a *candidate* for the main cache, a segmented
    LRU (``probation`` and ``protected``, 80 % of the main bytes): it is
    admitted only if its estimated frequency beats that of each main victim
    it would displace; otherwise the candidate leaves.  A hit in probation
    promotes to protected, whose overflow is demoted back to probation.

    Frequencies are counted over a sliding sample as TinyLFU does: every
    request counts, and after ``sample_factor`` times the number of cached
    objects requests all counts are halved.  The counts are exact (a
    count-min sketch of enough width gives the same estimates; its
    collisions only ever raise them), and Caffeine's hill-climbing of the
    window size is left out: the window stays at 1 %, Caffeine's start.
    """

    name = "wtinylfu"
    window_share = 0.01
    protected_share = 0.80
    sample_factor = 10

    def __init__(self, capacity: int, label: str | None = None):
        super().__init__(capacity, label)
        self.window: OrderedDict[int, int] = OrderedDict()  # oid -> size; first item is the LRU end
        self.probation: OrderedDict[int, int] = OrderedDict()
        self.protected: OrderedDict[int, int] = OrderedDict()
        self.window_bytes = self.probation_bytes = self.protected_bytes = 0
        self.counts: dict[int, int] = {}
        self.samples = 0

    def replay(self, times, ids, sizes, groups):
        window, probation, protected, counts = self.window, self.probation, self.protected, self.counts
        hits = hit_bytes = 0
        for oid, size in zip(ids, sizes):
            counts[oid] = counts.get(oid, 0) + 1
            self.samples += 1
            if self.samples >= self.sample_factor * max(64, len(window) + len(probation) + len(protected)):
                self._age()
                counts = self.counts  # the aged counts are a new dict: count into it from now on
            if oid in window:
                window.move_to_end(oid)
            elif oid in protected:
                protected.move_to_end(oid)
            elif oid in probation:
                del probation[oid]
                self.probation_bytes -= size
                protected[oid] = size
                self.protected_bytes += size
                self._demote_protected_overflow()
            else:
                if size <= self.capacity:
                    self._insert(oid, size)
                continue
            hits += 1
            hit_bytes += size
        return hits, hit_bytes

    def _age(self) -> None:
        self.counts = {oid: count >> 1 for oid, count in self.counts.items() if count > 1}
        self.samples = 0

    def _insert(self, oid: int, size: int) -> None:
        self.window[oid] = size
        self.window_bytes += size
        self.used += size
        self.staged += size
        window_cap = max(self.window_share * self.capacity, 0)
        while self.window_bytes > window_cap and self.window:
            candidate, candidate_size = self.window.popitem(last=False)
            self.window_bytes -= candidate_size
            self._offer_to_main(candidate, candidate_size)

    def _offer_to_main(self, candidate: int, size: int) -> None:
        """Admit the window's victim into probation if it is more popular than every main victim it needs."""
        main_cap = self.capacity - self.window_bytes
        frequency = self.counts.get(candidate, 0)
        while self.probation_bytes + self.protected_bytes + size > main_cap:
            queue = self.probation if self.probation else self.protected
            if not queue:
                self._leave(size)  # larger than the main cache can ever hold
                return
            victim, victim_size = next(iter(queue.items()))
            if frequency <= self.counts.get(victim, 0):
                self._leave(size)  # the candidate loses: it leaves, the main cache is untouched
                return
            del queue[victim]
            if queue is self.probation:
                self.probation_bytes -= victim_size
            else:
                self.protected_bytes -= victim_size
            self._leave(victim_size)
        self.probation[candidate] = size
        self.probation_bytes += size

    def _demote_protected_overflow(self) -> None:
        limit = self.protected_share * (self.capacity - self.window_bytes)
        while self.protected_bytes > limit and self.protected:
            oid, size = self.protected.popitem(last=False)
            self.protected_bytes -= size
            self.probation[oid] = size
            self.probation_bytes += size

    def _leave(self, size: int) -> None:
        self.used -= size
        self.evicted += size

"""Offline policies and bounds: they know the future of the trace.

Belady's MIN (Belady 1966; Mattson et al. 1970) evicts the cached object
whose next request is farthest in the future, and does not keep an object
whose next request is farther than every cached one.  For objects of equal
size it is optimal: no policy has more hits.  With variable sizes the
optimum is NP-hard and Belady's rule is only a good feasible schedule, i.e.
a *lower* bound on the optimal hit count.

For variable sizes the simulator therefore also computes **PFOO-L**, the
practical lower bound on the miss ratio (an *upper* bound on hits and hit
bytes) of Berger, Beckmann and Harchol-Balter, "Practical Bounds on Optimal
Caching with Variable Object Sizes", SIGMETRICS 2018.  Every hit of a
demand-fetched cache needs the object to stay cached over its whole reuse
interval, ``size * (next - i)`` byte-steps of space; the cache offers
``capacity * requests`` byte-steps in all.  PFOO-L relaxes "at most
``capacity`` bytes at every step" to "on average over the trace" and then
solves the relaxed problem exactly as a fractional knapsack: reuse intervals
are taken cheapest first (shortest for byte hits, smallest ``size*length``
for object hits).  No demand-fetched cache, online or offline, beats it.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

from .policies import CachePolicy

__all__ = ["BeladyPolicy", "Bound", "next_uses", "pfoo_lower_bound", "NEVER_AGAIN"]

NEVER_AGAIN = np.iinfo(np.int64).max


def next_uses(ids: np.ndarray) -> np.ndarray:
    """For every request, the index of the next request of the same object (``NEVER_AGAIN`` if none)."""
    ids = np.asarray(ids)
    order = np.argsort(ids, kind="stable")
    nxt = np.full(len(ids), NEVER_AGAIN, dtype=np.int64)
    if len(ids) > 1:
        same = ids[order[1:]] == ids[order[:-1]]
        nxt[order[:-1][same]] = order[1:][same]
    return nxt


class BeladyPolicy(CachePolicy):
    """Belady's MIN with bypass; replayed with :meth:`replay_future` (the next use of each request)."""

    name = "belady"
    needs_future = True

    def __init__(self, capacity: int, label: str | None = None):
        super().__init__(capacity, label)
        self._next: dict[int, int] = {}  # cached object -> its next use (key of its live heap entry)
        self._sizes: dict[int, int] = {}
        self._heap: list[tuple[int, int]] = []  # (-next use, oid): farthest first

    def replay(self, times, ids, sizes, groups):
        raise TypeError("Belady's MIN needs the future: use replay_future(ids, sizes, next_uses)")

    def replay_future(self, ids: list[int], sizes: list[int], nexts: list[int]) -> tuple[int, int]:
        cached_next, cached_sizes, heap, cap, used = self._next, self._sizes, self._heap, self.capacity, self.used
        push, pop = heapq.heappush, heapq.heappop
        hits = hit_bytes = staged = evicted = 0
        for oid, size, nxt in zip(ids, sizes, nexts):
            if oid in cached_next:
                hits += 1
                hit_bytes += size
                cached_next[oid] = nxt
                push(heap, (-nxt, oid))
                continue
            if size > cap:
                continue
            cached_next[oid] = nxt
            cached_sizes[oid] = size
            push(heap, (-nxt, oid))
            used += size
            while used > cap:
                far, victim = pop(heap)
                if cached_next.get(victim) != -far:
                    continue  # dead entry: the object was requested again since
                del cached_next[victim]
                victim_size = cached_sizes.pop(victim)
                used -= victim_size
                if victim == oid:
                    size = 0  # bypass: the new object is the one needed last
                else:
                    evicted += victim_size
            staged += size
            if len(heap) > 4 * len(cached_next) + 1024:
                heap[:] = [(-n, o) for o, n in cached_next.items()]
                heapq.heapify(heap)
        self.used = used
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes


@dataclass
class Bound:
    """An upper bound on what any demand-fetched cache of ``capacity`` bytes can hit."""

    capacity: int
    hits: float
    hit_bytes: float
    #: byte hits per window of requests (same windows as the replay), for plots over time
    hit_bytes_series: np.ndarray


def pfoo_lower_bound(ids: np.ndarray, sizes: np.ndarray, capacities: list[int], nexts: np.ndarray | None = None,
                     window: int = 65536) -> list[Bound]:
    """PFOO-L (see the module docstring) for each capacity: upper bounds on hits and on hit bytes.

    ``ids`` and ``sizes`` are per request; ``window`` is the number of
    requests per entry of ``hit_bytes_series``.
    """
    n = len(ids)
    nexts = next_uses(ids) if nexts is None else nexts
    starts = np.flatnonzero(nexts != NEVER_AGAIN)
    ends = nexts[starts]
    lengths = ends - starts
    interval_sizes = np.asarray(sizes, dtype=np.int64)[starts].astype(np.float64)
    del nexts
    windows = max(1, -(-n // window))
    bounds = []
    by_length = np.argsort(lengths, kind="stable")
    by_cost = np.argsort(interval_sizes * lengths, kind="stable")
    for capacity in capacities:
        fits = interval_sizes <= capacity
        budget = float(capacity) * n
        hit_fraction = _knapsack(by_cost, fits, interval_sizes * lengths, budget, len(starts))
        hits = float(hit_fraction.sum())
        byte_fraction = _knapsack(by_length, fits, interval_sizes * lengths, budget, len(starts))
        hit_bytes_each = byte_fraction * interval_sizes
        series = np.bincount(ends // window, weights=hit_bytes_each, minlength=windows)[:windows]
        bounds.append(Bound(capacity, hits, float(hit_bytes_each.sum()), series))
    return bounds


def _knapsack(order: np.ndarray, fits: np.ndarray, costs: np.ndarray, budget: float, count: int) -> np.ndarray:
    """Fractional knapsack in ``order``: the fraction (0..1) of each interval that the budget buys."""
    taken = np.zeros(count, dtype=np.float64)
    chosen = order[fits[order]]
    cumulative = np.cumsum(costs[chosen])
    full = int(np.searchsorted(cumulative, budget, side="right"))
    taken[chosen[:full]] = 1.0
    if full < len(chosen):
        spent = cumulative[full - 1] if full else 0.0
        taken[chosen[full]] = (budget - spent) / costs[chosen[full]]
    return taken

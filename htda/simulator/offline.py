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
from typing import Any, Protocol

import numpy as np

from .policies import CachePolicy

__all__ = ["BeladyPolicy", "Bound", "next_uses", "pfoo_lower_bound", "NEVER_AGAIN"]

NEVER_AGAIN = np.iinfo(np.int32).max  # the next use of a request whose object is never requested again
_BLOCK = 1 << 20  # requests per block of the offline passes: their memory does not grow with the trace


def next_uses(ids: np.ndarray, block: int = _BLOCK) -> np.ndarray:
    """For every request, the index of the next request of the same object (``NEVER_AGAIN`` if none).

    One backward pass in blocks: memory is the int32 result (4 bytes per
    request) plus one entry per object, never a sort of the whole trace.
    """
    ids = np.asarray(ids)
    n = len(ids)
    if n >= NEVER_AGAIN:
        raise ValueError(f"traces of {NEVER_AGAIN:,} requests or more need a 64-bit next-use table")
    nxt = np.empty(n, dtype=np.int32)
    later = np.full(int(ids.max()) + 1 if n else 0, NEVER_AGAIN, dtype=np.int32)  # first use after the block
    for start in range((n - 1) // block * block if n else -1, -1, -block):
        part = ids[start:start + block]
        order = np.argsort(part, kind="stable")
        ordered = part[order]
        same = ordered[1:] == ordered[:-1]
        result = np.empty(len(part), dtype=np.int32)
        result[order[:-1][same]] = order[1:][same] + start
        last = np.append(~same, True)
        result[order[last]] = later[ordered[last]]
        first = np.insert(~same, 0, True)
        later[ordered[first]] = order[first] + start
        nxt[start:start + len(part)] = result
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
    #: byte hits per window of requests (same windows as the replay): how the bound's hits fall in time
    hit_bytes_series: np.ndarray


class _Buckets:
    """Geometric buckets of width ``1 + eps`` over positive costs; bucket 0 holds costs below 1.

    Every item is charged its bucket's *lower* edge, never more than its real
    cost, so the knapsack over buckets can only buy more than the exact one:
    the bound stays a bound, at most ``eps`` looser.  Within a bucket every
    item has the same value per charged cost, so taking buckets cheapest first
    (the last one fractionally) solves the bucketed knapsack exactly, in
    memory that does not grow with the trace.
    """

    def __init__(self, eps: float = 1e-3):
        self.log_base = np.log1p(eps)
        self.eps = eps

    def index(self, cost: np.ndarray) -> np.ndarray:
        with np.errstate(divide="ignore"):
            idx = np.floor(np.log(np.maximum(cost, 1.0)) / self.log_base).astype(np.int64) + 1
        idx[cost < 1.0] = 0
        return idx

    def lower_edge(self, idx: np.ndarray) -> np.ndarray:
        # a hair below the edge, so rounding in index() never charges an item more than its cost
        edge = np.exp((idx - 1) * self.log_base) * (1 - 1e-9)
        return np.where(idx == 0, 0.0, edge)


def _intervals(ids, sizes, nexts, block):
    """Per block: the end index, the size and the length of each reuse interval starting in it."""
    for start in range(0, len(ids), block):
        nxt = nexts[start:start + block]
        has_next = nxt != NEVER_AGAIN
        begins = np.flatnonzero(has_next) + start
        ends = nxt[has_next].astype(np.int64)
        yield ends, np.asarray(sizes[begins], dtype=np.float64), (ends - begins).astype(np.float64)


def _greedy(charges: np.ndarray, values: np.ndarray, budget: float) -> tuple[float, int, float]:
    """Buckets cheapest first within ``budget``: (value bought, threshold bucket, fraction of it bought)."""
    spent = np.cumsum(charges)
    full = int(np.searchsorted(spent, budget, side="right"))
    value = float(values[:full].sum())
    if full >= len(charges):
        return value, len(charges), 0.0
    left = budget - (spent[full - 1] if full else 0.0)
    fraction = left / charges[full] if charges[full] > 0 else 1.0
    return value + fraction * float(values[full]), full, fraction


class SizeLookup(Protocol):
    """Sizes of requests by their positions in the trace: an array, or anything indexable like one."""

    def __getitem__(self, positions: np.ndarray, /) -> Any: ...


def pfoo_lower_bound(ids: np.ndarray, sizes: SizeLookup, capacities: list[int], nexts: np.ndarray | None = None,
                     window: int = 65536, eps: float = 1e-3, block: int = _BLOCK) -> list[Bound]:
    """PFOO-L (see the module docstring) for each capacity: upper bounds on hits and on hit bytes.

    ``ids`` and ``sizes`` are per request (``sizes`` may be any array-like
    indexable by request positions); ``window`` is the number of requests per
    entry of ``hit_bytes_series``.  Intervals are bucketed (:class:`_Buckets`,
    relative width ``eps``), so memory stays bounded on long traces.
    """
    n = len(ids)
    nexts = next_uses(ids) if nexts is None else nexts
    buckets = _Buckets(eps)
    caps = [float(c) for c in capacities]
    # per capacity: byte hits bucketed by interval length, object hits bucketed by size * length
    by_length: list[dict[str, np.ndarray]] = [{"charge": np.zeros(0), "value": np.zeros(0)} for _ in caps]
    by_cost: list[dict[str, np.ndarray]] = [{"charge": np.zeros(0), "value": np.zeros(0)} for _ in caps]
    for _, size, length in _intervals(ids, sizes, nexts, block):
        length_idx, cost_idx = buckets.index(length), buckets.index(size * length)
        for cap, bl, bc in zip(caps, by_length, by_cost):
            fits = size <= cap
            _accumulate(bl, length_idx[fits], size[fits] * buckets.lower_edge(length_idx[fits]), size[fits])
            _accumulate(bc, cost_idx[fits], buckets.lower_edge(cost_idx[fits]), np.ones(int(fits.sum())))
    windows = max(1, -(-n // window))
    bounds = []
    for cap, bl, bc in zip(caps, by_length, by_cost):
        hits = _greedy(bc["charge"], bc["value"], cap * n)[0]
        hit_bytes, threshold, fraction = _greedy(bl["charge"], bl["value"], cap * n)
        series = np.zeros(windows)
        for ends, size, length in _intervals(ids, sizes, nexts, block):
            idx = buckets.index(length)
            taken = np.where(idx < threshold, 1.0, np.where(idx == threshold, fraction, 0.0)) * (size <= cap)
            series += np.bincount(ends // window, weights=taken * size, minlength=windows)[:windows]
        bounds.append(Bound(int(cap), hits, hit_bytes, series))
    return bounds


def _accumulate(table: dict[str, np.ndarray], idx: np.ndarray, charges: np.ndarray, values: np.ndarray) -> None:
    if not len(idx):
        return
    top = int(idx.max()) + 1
    for name, weights in (("charge", charges), ("value", values)):
        counts = np.bincount(idx, weights=weights, minlength=top)
        grown = np.zeros(max(top, len(table[name])))
        grown[: len(table[name])] = table[name]
        grown[:top] += counts
        table[name] = grown

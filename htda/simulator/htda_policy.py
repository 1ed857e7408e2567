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

Without an admission filter the cache is C (``_replay.c``, built by
``setup.py`` like the rating's kernel, class :class:`~._replay.Loop`): its
own tables of files and groups by id and a heap of (key, file id) pairs, the
same steps as the Python loop that ``tests/simulator/test_compiled.py`` keeps
as a reference, so the same hits, bytes staged and evicted.  It calls the
rating as that loop did (the adaptive kernel directly, through the C
functions its ``_c_api()`` hands over, when its ``access`` is the kernel's:
no call through Python, keys read from the kernel's table) and re-keys
itself when an adaptive rating switches.  It lays itself out as an adaptive
rating's ``layout`` says: plain, asking the admission question, or with new
files on probation (S3-FIFO's queue and ghost list in front of the heap;
``_replay.c``); once the rating has *settled* on probation (its
``settled``), the files the heap still holds that were read only once go
on probation too.
With an admission filter (:meth:`HTDAPolicy._replay_admitted`) the cache is
still Python, over the dicts below.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable

import numpy as np

from ..coordinator.admission import FrequencySketch, TinyLFUAdmission
from ..coordinator.rating import RatingPolicy, best_key, normalised_key
from ..kernels import not_built
from .policies import CachePolicy
from .trace import NO_GROUP

try:
    from ._replay import Loop
except ImportError as exc:
    raise not_built(exc) from exc

__all__ = ["HTDAPolicy", "ACCESS_MODES"]

ACCESS_MODES = ("job", "request")


def _column(values, dtype) -> np.ndarray:
    """``values`` (the engine's array, or any sequence or iterable) as the contiguous array the compiled loop reads
    in place."""
    if not isinstance(values, (np.ndarray, list, tuple)):
        values = list(values)
    return np.ascontiguousarray(values, dtype=dtype)


def _weak_callback(method: Callable[[], None]) -> Callable[[], None]:
    """A callback to a bound ``method`` that does not keep its object alive.  The rating calls the policy back on a
    switch and the policy holds the rating: a strong reference would make the two a cycle, and a replay's tables
    (hundreds of MB on a large trace) would outlive it until the garbage collector's next full pass: replays
    repeated in one process each started with more memory, and ran slower."""
    method_ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = method_ref()
        if bound is not None:
            bound()
    return call


class HTDAPolicy(CachePolicy):
    """A cache evicting by the coordinator's rating of file groups (see the module docstring)."""

    name = "htda"

    def __init__(self, capacity: int, rating: RatingPolicy[int], label: str | None = None, per_size: bool = False,
                 accesses: str = "job", admission: TinyLFUAdmission | None = None, objects: int = 0):
        """``objects``: the distinct objects of the trace, if known (0 if not): the tables start with room for
        them (and as many groups) instead of growing, which moves every entry each time.  They are made at the
        first request, not here: a run builds every policy first and replays them one after another, and
        tables reserved at once for each would all be held at once (gigabytes on a trace of millions of
        objects)."""
        if accesses not in ACCESS_MODES:
            raise ValueError(f"accesses must be one of {', '.join(ACCESS_MODES)}")
        super().__init__(capacity, label)
        self.rating = rating
        self.per_size = per_size
        self.accesses = accesses
        self.admission = admission
        # the cache's tables with admission (the Python loop of _replay_admitted)
        self._where: dict[int, bool] = {}  # cached file -> True in the window, False in main
        self._window_heap: list[tuple[float, int]] = []
        self.window_used = 0
        self._climbing = (0, 0, 0)  # the window's hill climbing: requests, bytes hit and bytes of its sample so far
        self._group_of: dict[int, int] = {}  # file -> the group it was first requested in
        self._more_groups: dict[int, set[int]] = {}  # file -> all its groups, for files in several groups
        self._last_access: dict[int, float] = {}  # group -> time of its last recorded access
        self._entry_key: dict[int, float] = {}  # cached file -> key of its one live heap entry
        self._sizes: dict[int, int] = {}  # cached file -> size
        self._heap: list[tuple[float, int]] = []
        # an adaptive rating (``lrfu-adaptive``) sizes its shadow caches by this cache and re-keys it on a switch
        self._group_bytes: dict[int, int] | None = None
        if callable(getattr(rating, "set_capacity", None)):
            rating.set_capacity(capacity)  # type: ignore[attr-defined]
            rating.on_switch = _weak_callback(self._rekey)  # type: ignore[attr-defined]
            self._group_bytes = {}  # group -> bytes of the files first requested in it (its shadows' size)
        self._objects = objects  # reserved for at the first request (then 0)
        # without admission the cache is the compiled one, with its own tables (the ones above stay empty),
        # made at the first request (:meth:`_compiled`)
        self._loop: Loop | None = None

    @property
    def takes_arrays(self) -> bool:  # type: ignore[override]
        return self.admission is None  # the compiled cache reads the chunk's arrays in place

    def _compiled(self) -> Loop:
        """The compiled cache, made on first use."""
        if self._loop is None:
            self._loop = Loop(rating=self.rating, capacity=self.capacity, per_job=self.accesses == "job",
                              per_size=self.per_size, sized=self._group_bytes is not None, reserve=self._objects)
        return self._loop

    def contents(self) -> dict[int, int]:
        """The cached files and their sizes (a copy)."""
        return dict(self._sizes) if self.admission is not None else self._compiled().contents()

    def file_key(self, oid: int) -> float:
        """The file's current key: the best of its groups' keys (per byte if ``per_size``)."""
        if self.admission is None:
            return self._compiled().file_key(oid)
        groups = self._more_groups.get(oid)
        key = self.rating.key(self._group_of[oid]) if groups is None else best_key(map(self.rating.key, groups))
        return normalised_key(key, self._sizes.get(oid)) if self.per_size else key

    def _rekey(self) -> None:
        """Every key changed (an adaptive rating switched half-life): re-key the cached files and rebuild the heaps
        in place (the admission loop holds them)."""
        if self.admission is None:
            if self._loop is not None:  # (a cache not made yet holds nothing to re-key)
                self._loop.rekey()
            return
        entry_key = self._entry_key
        for oid in entry_key:
            entry_key[oid] = self.file_key(oid)
        where = self._where
        self._heap[:] = [(entry_key[oid], oid) for oid, in_window in where.items() if not in_window]
        self._window_heap[:] = [(entry_key[oid], oid) for oid, in_window in where.items() if in_window]
        heapq.heapify(self._window_heap)
        heapq.heapify(self._heap)

    def replay(self, times, ids, sizes, groups):
        if self._objects:  # the first request: the tables' room (see __init__)
            if callable(getattr(self.rating, "reserve", None)):
                self.rating.reserve(self._objects)  # type: ignore[attr-defined]
            if self.admission is None:
                self._compiled()  # its tables with that room, before it is forgotten
            self._objects = 0
        if self.admission is not None:
            return self._replay_admitted(times, ids, sizes, groups, self.admission)
        hits, hit_bytes, staged, evicted, self.used = self._compiled().replay(
            _column(times, np.float64), _column(ids, np.int64), _column(sizes, np.int64), _column(groups, np.int64),
            self.used)
        self.rating.take_touched()  # the coordinator's incremental bookkeeping; the simulator does not need it
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes

    def _replay_admitted(self, times, ids, sizes, groups, admission: TinyLFUAdmission):
        """The cache as W-TinyLFU lays it out, with the rating's order inside each part: new files enter a
        *window* (``admission.window`` of the bytes); the window's lowest-keyed file is then the candidate for
        the *main* part, which it enters only if the admission filter finds it more frequent than each main
        victim it needs (lowest key first); otherwise it leaves."""
        rating, group_of, more_groups, last_access = self.rating, self._group_of, self._more_groups, self._last_access
        entry_key, cached_sizes, where, cap = self._entry_key, self._sizes, self._where, self.capacity
        main, window = self._heap, self._window_heap
        access, file_key, keys = rating.access, self.file_key, rating.keys()
        record, frequency = admission.sketch.increment_mixed, admission.frequency
        # the sketch's hashing of every request's group, for the whole chunk at once (numpy)
        group_array = np.asarray(groups, dtype=np.int64)
        mixes = FrequencySketch.mixes(np.where(group_array == NO_GROUP, -2 - np.asarray(ids, dtype=np.int64),
                                               group_array))
        push, pop = heapq.heappush, heapq.heappop
        per_job = self.accesses == "job"
        group_bytes = self._group_bytes
        fast = not self.per_size
        used, window_used = self.used, self.window_used
        window_cap = admission.window * cap
        sample = admission.sample_size
        # the hill climbing's sample carries over from chunk to chunk: where a chunk ends is the reader's business
        sampled, sample_hit_bytes, sample_bytes = self._climbing
        hits = hit_bytes = staged = evicted = 0

        def lowest(heap: list[tuple[float, int]]) -> int:
            """The file of ``heap``'s lowest current key (stale entries re-pushed on the way)."""
            while True:
                key, victim = heap[0]
                current = keys[group_of[victim]] if fast and victim not in more_groups else file_key(victim)
                if current == key:
                    return victim
                entry_key[victim] = current
                heapq.heapreplace(heap, (current, victim))

        for t, oid, size, group, h, g in zip(times, ids, sizes, groups, *mixes):
            if group == NO_GROUP:
                group = -2 - oid
            known = group_of.get(oid)
            if known is None:  # a new file: its group's size grows by it
                group_of[oid] = known = group
                if group_bytes is not None:
                    group_bytes[group] = group_bytes.get(group, 0) + size
            elif known != group:
                more_groups.setdefault(oid, {known}).add(group)
            if not per_job or last_access.get(group) != t:
                last_access[group] = t
                if group_bytes is None:
                    access(group, t)
                else:
                    # (a group no file was first requested in has no bytes of its own)
                    access(group, t, 1.0, group_bytes.get(group, 0))
                record(h, g)
            sampled += 1
            sample_bytes += size
            if sampled >= sample:  # a sample of requests: adapt the window to its byte hit ratio
                window_cap = admission.sampled(sample_hit_bytes / sample_bytes if sample_bytes else 0.0) * cap
                sample = admission.sample_size
                sampled = sample_hit_bytes = sample_bytes = 0
            if oid in entry_key:
                hits += 1
                hit_bytes += size
                sample_hit_bytes += size
                continue
            if size > cap:
                continue
            cached_sizes[oid] = size
            entry_key[oid] = keys[group] if fast and known == group and oid not in more_groups else file_key(oid)
            push(window, (entry_key[oid], oid))
            where[oid] = True
            window_used += size
            used += size
            staged += size
            while window_used > window_cap and window:  # the window's lowest files are candidates for main
                candidate = lowest(window)
                pop(window)
                candidate_size = cached_sizes[candidate]
                window_used -= candidate_size
                admitted = True
                mine = -1  # the candidate's frequency, estimated once it is needed
                while used > cap and main:
                    victim = lowest(main)
                    victim_group = group_of[victim]
                    if mine < 0:
                        mine = frequency(group_of[candidate])
                    if victim_group != group_of[candidate] and mine <= frequency(victim_group):
                        admitted = False
                        break
                    pop(main)
                    del entry_key[victim], where[victim]
                    victim_size = cached_sizes.pop(victim)
                    used -= victim_size
                    evicted += victim_size
                if admitted and used <= cap:
                    push(main, (entry_key[candidate], candidate))
                    where[candidate] = False
                else:
                    del entry_key[candidate], where[candidate]
                    del cached_sizes[candidate]
                    used -= candidate_size
                    evicted += candidate_size
            while used > cap:  # the window grew into main's bytes: main's lowest go, unasked
                victim = lowest(main) if main else lowest(window)
                pop(main if main else window)
                if where.pop(victim):
                    window_used -= cached_sizes[victim]
                del entry_key[victim]
                victim_size = cached_sizes.pop(victim)
                used -= victim_size
                evicted += victim_size
            if len(entry_key) > admission.sketch.width:  # the sketch counts about as many groups as are held
                admission.ensure_width(len(entry_key))
                sample = admission.sample_size
        rating.take_touched()
        self.used, self.window_used = used, window_used
        self._climbing = (sampled, sample_hit_bytes, sample_bytes)
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes

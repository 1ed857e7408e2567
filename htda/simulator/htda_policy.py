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

The cache is C (``_replay.c``, built by ``setup.py`` like the rating's
kernel, class :class:`~._replay.Loop`): its own tables of files and groups by
id and a heap of (key, file id) pairs, the same steps as the Python loop that
``tests/simulator/test_compiled.py`` keeps as a reference, so the same hits,
bytes staged and evicted.  It calls the rating as that loop did (the adaptive
kernel directly, through the C functions its ``_c_api()`` hands over, when its
``access`` is the kernel's: no call through Python, keys read from the
kernel's table) and re-keys itself when an adaptive rating switches.  Without
an admission filter it lays itself out as an adaptive rating's ``layout``
says: plain, asking the admission question, or with new files on probation
(S3-FIFO's queue and ghost list in front of the heap; ``_replay.c``); once
the rating has *settled* on probation (its ``settled``), the files the heap
still holds that were read only once go on probation too.  With a TinyLFU
filter (``admission``) it is laid out as W-TinyLFU is, the rating's order
inside each part: new files enter a *window* (``admission.window`` of the
bytes, moved by its hill climbing); the window's lowest-keyed file is then
the candidate for the *main* part, which it enters only if the filter's
sketch finds its group more frequent than each main victim's, lowest key
first; otherwise it leaves.  The sketch is the admission's own
(:class:`~htda.coordinator.admission.FrequencySketch`), counted in C as its
``increment`` counts; ``tests/simulator/test_compiled_admission.py`` keeps
the Python loop of this layout as its reference.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable

import numpy as np

from ..coordinator.admission import TinyLFUAdmission
from ..coordinator.rating import RatingPolicy
from ..kernels import not_built
from .policies import CachePolicy

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
    takes_arrays = True  # the compiled cache reads the chunk's arrays in place

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
        # an adaptive rating (``lrfu-adaptive``) sizes its shadow caches by this cache and its groups' bytes, and
        # re-keys the cache on a switch
        self._sized = callable(getattr(rating, "set_capacity", None))
        if self._sized:
            rating.set_capacity(capacity)  # type: ignore[attr-defined]
            rating.on_switch = _weak_callback(self._rekey)  # type: ignore[attr-defined]
        self._objects = objects  # reserved for at the first request (then 0)
        # the compiled cache, with its own tables, made at the first request (:meth:`_compiled`)
        self._loop: Loop | None = None

    @property
    def window_used(self) -> int:
        """With an admission filter: the bytes of the files in its window (0 without)."""
        return self._loop.window_used if self._loop is not None else 0

    def _compiled(self) -> Loop:
        """The compiled cache, made on first use."""
        if self._loop is None:
            self._loop = Loop(rating=self.rating, capacity=self.capacity, per_job=self.accesses == "job",
                              per_size=self.per_size, sized=self._sized, reserve=self._objects,
                              admission=self.admission)
            if self._loop.reads_kernel:  # it reads every key from the kernel's table: the dict would only cost
                self.rating.mirror_keys = False  # type: ignore[attr-defined]
        return self._loop

    def contents(self) -> dict[int, int]:
        """The cached files and their sizes (a copy)."""
        return self._compiled().contents()

    def file_key(self, oid: int) -> float:
        """The file's current key: the best of its groups' keys (per byte if ``per_size``)."""
        return self._compiled().file_key(oid)

    def _rekey(self) -> None:
        """Every key changed (an adaptive rating switched half-life): the cache re-keys its files."""
        if self._loop is not None:  # (a cache not made yet holds nothing to re-key)
            self._loop.rekey()

    def replay(self, times, ids, sizes, groups):
        if self._objects:  # the first request: the tables' room (see __init__)
            if callable(getattr(self.rating, "reserve", None)):
                self.rating.reserve(self._objects)  # type: ignore[attr-defined]
            self._compiled()  # its tables with that room, before it is forgotten
            self._objects = 0
        hits, hit_bytes, staged, evicted, self.used = self._compiled().replay(
            _column(times, np.float64), _column(ids, np.int64), _column(sizes, np.int64), _column(groups, np.int64),
            self.used)
        self.rating.clear_touched()  # the coordinator's incremental bookkeeping; the simulator does not need it
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes

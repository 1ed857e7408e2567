"""HTDAPolicy's compiled cache with a TinyLFU filter (``_replay.c``) decides as the Python loop it replaced.

:class:`ReferenceAdmitted` is that loop, kept as the reference: W-TinyLFU's
layout (a window of new files in front of a main part that a window file
enters only if the admission's sketch finds its group more frequent than each
victim's), the rating's order inside each part.  Every trace is replayed,
chunk by chunk, through both, each with its own rating and admission of the
same configuration; every chunk's hits, the bytes staged, evicted and held,
the window's bytes, the cached files, the rating's switches and the sketch's
counters, doorkeeper and window share must be equal.
"""

from __future__ import annotations

import heapq
import random
from typing import Any

import pytest

from htda.coordinator.admission import TinyLFUAdmission
from htda.coordinator.rating import LRFUPolicy
from htda.simulator.htda_policy import HTDAPolicy
from htda.simulator.trace import NO_GROUP

from .test_compiled import ReferenceHTDA, Trace, adaptive, random_trace


class ReferenceAdmitted(ReferenceHTDA):
    """HTDAPolicy with a TinyLFU filter as plain Python: the loop the C one must match, step for step (its heap
    is the main part's)."""

    def __init__(self, capacity: int, rating: Any, admission: TinyLFUAdmission, per_size: bool = False,
                 accesses: str = "job"):
        super().__init__(capacity, rating, per_size, accesses)
        self.admission = admission
        self.window_used = 0
        self.climbing = (0, 0, 0)  # requests, bytes hit and bytes of the window's sample so far
        self.where: dict[int, bool] = {}  # cached file -> True in the window, False in main
        self.window: list[tuple[float, int]] = []

    def rekey(self) -> None:
        self.entry_key.update({oid: self.current_key(oid) for oid in self.entry_key})
        self.heap[:] = [(self.entry_key[oid], oid) for oid, in_window in self.where.items() if not in_window]
        self.window[:] = [(self.entry_key[oid], oid) for oid, in_window in self.where.items() if in_window]
        heapq.heapify(self.heap)
        heapq.heapify(self.window)

    def lowest(self, heap: list[tuple[float, int]]) -> int:
        while True:
            key, victim = heap[0]
            current = self.current_key(victim)
            if current == key:
                return victim
            self.entry_key[victim] = current
            heapq.heapreplace(heap, (current, victim))

    def drop(self, oid: int) -> None:
        del self.entry_key[oid], self.where[oid]
        size = self.sizes.pop(oid)
        self.used -= size
        self.evicted += size

    def replay(self, times, ids, sizes, groups) -> tuple[int, int]:
        admission, cap = self.admission, self.capacity
        frequency = admission.frequency
        window_cap = admission.window * cap
        sample = admission.sample_size
        sampled, sample_hit_bytes, sample_bytes = self.climbing
        hits = hit_bytes = 0
        for t, oid, size, group in zip(times, ids, sizes, groups):
            if group == NO_GROUP:
                group = -2 - oid
            known = self.group_of.get(oid)
            if known is None:
                self.group_of[oid] = known = group
                if self.group_bytes is not None:
                    self.group_bytes[group] = self.group_bytes.get(group, 0) + size
            elif known != group:
                self.more_groups.setdefault(oid, {known}).add(group)
            if not self.per_job or self.last_access.get(group) != t:
                self.last_access[group] = t
                if self.group_bytes is None:
                    self.rating.access(group, t)
                else:
                    self.rating.access(group, t, 1.0, self.group_bytes.get(group, 0))
                admission.record(group)
            sampled += 1
            sample_bytes += size
            if sampled >= sample:
                window_cap = admission.sampled(sample_hit_bytes / sample_bytes if sample_bytes else 0.0) * cap
                sample = admission.sample_size
                sampled = sample_hit_bytes = sample_bytes = 0
            if oid in self.entry_key:
                hits += 1
                hit_bytes += size
                sample_hit_bytes += size
                continue
            if size > cap:
                continue
            self.sizes[oid] = size
            self.entry_key[oid] = self.current_key(oid)
            heapq.heappush(self.window, (self.entry_key[oid], oid))
            self.where[oid] = True
            self.window_used += size
            self.used += size
            self.staged += size
            while self.window_used > window_cap and self.window:
                candidate = self.lowest(self.window)
                heapq.heappop(self.window)
                self.window_used -= self.sizes[candidate]
                admitted = True
                while self.used > cap and self.heap:
                    victim = self.lowest(self.heap)
                    group_of = self.group_of
                    if group_of[victim] != group_of[candidate] and (
                            frequency(group_of[candidate]) <= frequency(group_of[victim])):
                        admitted = False
                        break
                    heapq.heappop(self.heap)
                    self.drop(victim)
                if admitted and self.used <= cap:
                    heapq.heappush(self.heap, (self.entry_key[candidate], candidate))
                    self.where[candidate] = False
                else:
                    self.drop(candidate)
            while self.used > cap:
                heap = self.heap if self.heap else self.window
                victim = self.lowest(heap)
                heapq.heappop(heap)
                if self.where[victim]:
                    self.window_used -= self.sizes[victim]
                self.drop(victim)
            if len(self.entry_key) > admission.sketch.width:
                admission.ensure_width(len(self.entry_key))
                sample = admission.sample_size
        self.rating.take_touched()
        self.climbing = (sampled, sample_hit_bytes, sample_bytes)
        return hits, hit_bytes


def sketch_state(admission: TinyLFUAdmission) -> tuple:
    sketch = admission.sketch
    counters, door = sketch.tables()
    return bytes(counters), bytes(door), sketch.samples, sketch.width, admission.window


def replay_both(trace: Trace, capacity: int, make_rating, make_admission=lambda: TinyLFUAdmission(width=64),
                chunk: int = 1000, **options) -> HTDAPolicy:
    """Replay ``trace`` through the compiled and the reference cache, chunk by chunk, asserting they agree."""
    compiled = HTDAPolicy(capacity, make_rating(), admission=make_admission(), **options)
    reference = ReferenceAdmitted(capacity, make_rating(), make_admission(), **options)
    for start in range(0, len(trace[0]), chunk):
        part = [column[start:start + chunk] for column in trace]
        assert compiled.replay(*part) == reference.replay(*part)
        assert (compiled.staged, compiled.evicted, compiled.used, compiled.window_used) == (
            reference.staged, reference.evicted, reference.used, reference.window_used)
        assert sketch_state(compiled.admission) == sketch_state(reference.admission)
    assert compiled.contents() == reference.sizes
    assert compiled.rating.switches == reference.rating.switches if hasattr(compiled.rating, "switches") else True
    return compiled


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("capacity", [1_500, 6_000, 30_000])
def test_the_compiled_filter_matches_the_reference_with_the_adaptive_rating(seed, capacity):
    policy = replay_both(random_trace(seed), capacity, adaptive)
    assert policy.evicted > 0
    if capacity == 6_000:
        assert policy.rating.switches >= 2  # the cache was re-keyed mid-replay, window and main part


@pytest.mark.parametrize("options", [{}, {"per_size": True}, {"accesses": "request"}])
def test_the_compiled_filter_matches_the_reference_with_a_fixed_half_life(options):
    policy = replay_both(random_trace(4), 5_000, lambda: LRFUPolicy(half_life=30.0), **options)
    assert policy.evicted > 0


@pytest.mark.parametrize("options", [{"per_size": True}, {"accesses": "request"}])
def test_the_compiled_filter_matches_the_reference_with_options_and_switches(options):
    policy = replay_both(random_trace(5), 6_000, adaptive, **options)
    assert policy.rating.switches >= 1


def test_the_window_climbs_and_the_sketch_halves_and_widens_as_in_the_reference():
    # a sketch of 64 counters a row halves every 640 accesses and widens once the cache holds more than 64 files;
    # a climb every 64 requests moves the window
    admissions: list[TinyLFUAdmission] = []

    def make() -> TinyLFUAdmission:
        admissions.append(TinyLFUAdmission(width=64, sample_factor=10, window=0.3, climb_factor=0.5))
        return admissions[-1]

    policy = replay_both(random_trace(6, n=12_000, files=2_000), 200_000, lambda: LRFUPolicy(half_life=30.0),
                         make, chunk=333)
    assert policy.admission.sketch.width > 64  # widened
    assert policy.admission.window != 0.3  # climbed
    assert 0 < policy.window_used <= policy.used <= 200_000 and policy.evicted > 0


def test_a_window_of_the_whole_cache_is_the_rating_alone():
    # with every file in the window nothing is asked: the cache holds and hits what the plain one does (which
    # does not count a file that went at once as staged)
    trace = random_trace(7)
    whole_window = replay_both(trace, 5_000, lambda: LRFUPolicy(half_life=30.0),
                               lambda: TinyLFUAdmission(width=64, window=1.0, adaptive=False))
    plain = HTDAPolicy(5_000, LRFUPolicy(half_life=30.0))
    again = HTDAPolicy(5_000, LRFUPolicy(half_life=30.0), admission=TinyLFUAdmission(width=64, window=1.0,
                                                                                   adaptive=False))
    assert plain.replay(*trace) == again.replay(*trace)
    assert plain.contents() == again.contents() == whole_window.contents() and again.window_used == again.used


def test_ids_beyond_two_to_the_61_are_counted_by_their_python_hash():
    # Python hashes such an int to another (its magnitude modulo 2**61 - 1): the sketch the coordinator fills
    # counts that hash, and so must the compiled one
    rng = random.Random(9)
    big = [2**62 + 3 * k for k in range(40)] + [-(2**62) - 5 * k for k in range(40)] + [2**61 - 1, -(2**61) + 1]
    ids = [rng.choice(big) for _ in range(3000)]
    trace = ([float(t) for t in range(3000)], ids, [100] * 3000, [NO_GROUP] * 3000)
    policy = replay_both(trace, 2_000, lambda: LRFUPolicy(half_life=30.0))
    assert policy.evicted > 0 and policy.admission.sketch.counted() > 0


def test_a_sketch_whose_tables_are_not_powers_of_two_is_refused():
    admission = TinyLFUAdmission(width=64)
    admission.sketch._counters = bytearray(4 * 48)
    policy = HTDAPolicy(1_000, LRFUPolicy(half_life=30.0), admission=admission)
    with pytest.raises(ValueError, match="powers of two"):
        policy.replay([0.0], [1], [10], [NO_GROUP])

"""HTDAPolicy's compiled request loop (``htda/simulator/_replay.c``) decides as the Python loop it replaced.

:class:`ReferenceHTDA` below is that Python loop, kept as the reference (as
``tests/coordinator/test_adaptive.py`` keeps the rating's): every trace here is
replayed, chunk by chunk, through both, each with its own rating of the same
configuration, and every chunk's hits and hit bytes, the bytes staged and
evicted, the bytes held, the cached files and the rating's switches must be
equal.  The traces have groups (files requested in several), jobs (requests of a
group at one timestamp), files larger than the cache, evictions and, with the
adaptive rating, switches of its half-life that re-key the cache mid-replay.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from typing import Any

import numpy as np
import pytest

from htda.coordinator.adaptive import ASKING, LIRS, LIRS_SHARE, PLAIN, PROBATION, PROBATION_SHARE, AdaptiveLRFUPolicy
from htda.coordinator.rating import NEVER, LRFUPolicy, RatingPolicy, best_key, normalised_key
from htda.simulator.htda_policy import HTDAPolicy
from htda.simulator.trace import NO_GROUP

Trace = tuple[list[float], list[int], list[int], list[int]]
#: a queued file's mark once it was read again (in place of when it was queued)
READ = -math.inf


class ReferenceHTDA:
    """HTDAPolicy without a TinyLFU filter as plain Python: the loop the C one must match, step for step (the
    admission question, the probation queue and the LIRS layout included, when an adaptive rating's layout says
    so)."""

    def __init__(self, capacity: int, rating: Any, per_size: bool = False, accesses: str = "job"):
        self.capacity, self.rating, self.per_size, self.per_job = capacity, rating, per_size, accesses == "job"
        self.used = self.staged = self.evicted = 0
        self.group_of: dict[int, int] = {}
        self.more_groups: dict[int, set[int]] = {}
        self.last_access: dict[int, float] = {}
        self.entry_key: dict[int, float] = {}
        self.sizes: dict[int, int] = {}
        self.heap: list[tuple[float, int]] = []
        self.queue: OrderedDict[int, float] = OrderedDict()  # file -> when it was queued (READ: read again since)
        self.ghost: OrderedDict[int, int] = OrderedDict()  # file -> its size when it left the queue unread
        self.queued = self.ghosted = 0
        self.settled = False  # on probation since the rating settled: the files read once were queued
        self.queue_layout = PLAIN  # the layout the queue was filled for (PROBATION or LIRS), once there was one
        self.group_bytes: dict[int, int] | None = None
        if isinstance(rating, AdaptiveLRFUPolicy):
            rating.set_capacity(capacity)
            rating.on_switch = self.rekey
            self.group_bytes = {}

    def file_key(self, oid: int) -> float:
        groups = self.more_groups.get(oid)
        key = self.rating.key(self.group_of[oid]) if groups is None else best_key(map(self.rating.key, groups))
        return normalised_key(key, self.sizes.get(oid)) if self.per_size else key

    def current_key(self, oid: int) -> float:
        if not self.per_size and oid not in self.more_groups:
            return self.rating.keys()[self.group_of[oid]]
        return self.file_key(oid)

    def rekey(self) -> None:
        self.entry_key.update({oid: self.current_key(oid) for oid in self.entry_key})
        self.heap[:] = [(key, oid) for oid, key in self.entry_key.items()]
        heapq.heapify(self.heap)

    def to_heap(self, oid: int) -> None:
        self.entry_key[oid] = key = self.current_key(oid)
        heapq.heappush(self.heap, (key, oid))

    def end_probation(self) -> None:
        for oid in self.queue:
            self.to_heap(oid)
        self.queue.clear()
        self.ghost.clear()
        self.queued = self.ghosted = 0

    def settle(self, now: float) -> None:
        """The rating settled on probation: the heap's files whose group was read once join the queue, lowest first."""
        kept = []
        while self.heap:
            key, oid = heapq.heappop(self.heap)
            current = self.current_key(oid)
            if current != key:
                self.entry_key[oid] = current
                heapq.heappush(self.heap, (current, oid))
            elif self.rating.before(self.group_of[oid]) != NEVER:
                kept.append((key, oid))
            else:
                del self.entry_key[oid]
                self.queue[oid] = now
                self.queued += self.sizes[oid]
        for entry in kept:
            heapq.heappush(self.heap, entry)

    def settled_top(self) -> float:
        """The heap's lowest key, once the entries above it that went stale are pushed again with their keys now."""
        while True:
            key, oid = self.heap[0]
            current = self.current_key(oid)
            if current == key:
                return key
            heapq.heappop(self.heap)
            self.entry_key[oid] = current
            heapq.heappush(self.heap, (current, oid))

    def pop_lowest(self) -> int | None:
        """The heap's lowest file, out of the heap; None if its entry was stale (pushed again with its key now)."""
        key, victim = heapq.heappop(self.heap)
        current = self.current_key(victim)
        if current != key:
            self.entry_key[victim] = current
            heapq.heappush(self.heap, (current, victim))
            return None
        del self.entry_key[victim]
        return victim

    def lirs_recent(self, group: int, size: int) -> bool:
        """LIRS's test: the group's key before this access beats the heap's lowest."""
        if not self.heap:
            return False
        before = self.rating.before(group)
        before = normalised_key(before, size) if self.per_size else before
        return before != NEVER and before > self.settled_top()

    def lirs_place(self, oid: int, recent: bool, used: int, now: float) -> None:
        """Into the heap, whose lowest then go to the queue's tail while it holds more than its share; or queued."""
        if not recent:
            self.queue[oid] = now
            self.queued += self.sizes[oid]
            return
        self.to_heap(oid)
        while len(self.heap) > 1 and used - self.queued > (1.0 - LIRS_SHARE) * self.capacity:
            self.settled_top()
            _, low = heapq.heappop(self.heap)
            del self.entry_key[low]
            self.queue[low] = now
            self.queued += self.sizes[low]

    def lirs_hit(self, oid: int, group: int, size: int, used: int, now: float) -> None:
        recent = self.lirs_recent(group, size)
        del self.queue[oid]
        self.queued -= self.sizes[oid]
        self.lirs_place(oid, recent, used, now)

    def lirs_stage(self, oid: int, group: int, size: int, used: int, now: float) -> tuple[int, int, int]:
        """(used, staged, evicted) after a miss of ``oid`` while the rating lays the cache out as LIRS."""
        cap = self.capacity
        recent = used - self.queued + size <= (1.0 - LIRS_SHARE) * cap or self.lirs_recent(group, size)
        self.sizes[oid] = size
        used += size
        self.lirs_place(oid, recent, used, now)
        staged, evicted = size, 0
        while used > cap:
            victim = self.pop_oldest() if self.queue else self.pop_lowest()
            if victim is None:
                continue
            gone = self.sizes.pop(victim)
            used -= gone
            staged, evicted = (0, evicted) if victim == oid else (staged, evicted + gone)
        return used, staged, evicted

    def pop_oldest(self) -> int:
        victim, _ = self.queue.popitem(last=False)
        self.queued -= self.sizes[victim]
        return victim

    def read_again(self, oid: int, since: float) -> bool:
        """Read again while queued: the file itself, or its first group by a later job (not the file's own group)."""
        group = self.group_of[oid]
        return since == READ or (group != -2 - oid and self.last_access.get(group, since) > since)

    def stage_on_probation(self, oid: int, size: int, used: int, now: float) -> tuple[int, int, int]:
        """(used, staged, evicted) after a miss of ``oid`` while the rating puts new files on probation."""
        self.sizes[oid] = size
        used += size
        if oid in self.ghost:
            self.ghosted -= self.ghost.pop(oid)
            self.to_heap(oid)
        else:
            self.queue[oid] = now
            self.queued += size
        staged, evicted, cap = size, 0, self.capacity
        while used > cap:
            from_queue = bool(self.queue) and (self.queued >= PROBATION_SHARE * cap or not self.heap)
            if from_queue:
                victim, since = self.queue.popitem(last=False)
                self.queued -= self.sizes[victim]
                if self.read_again(victim, since):
                    self.to_heap(victim)
                    continue
            else:
                victim = self.pop_lowest()
                if victim is None:
                    continue
            victim_size = self.sizes.pop(victim)
            used -= victim_size
            if victim == oid:
                staged = 0
            else:
                evicted += victim_size
            if from_queue:  # it left the queue unread: remembered in the ghost list
                self.ghost[victim] = victim_size
                self.ghosted += victim_size
                while self.ghosted > (1.0 - PROBATION_SHARE) * cap and self.ghost:
                    self.ghosted -= self.ghost.popitem(last=False)[1]
        return used, staged, evicted

    def replay(self, times, ids, sizes, groups) -> tuple[int, int]:
        rating, group_of, more_groups, last_access = self.rating, self.group_of, self.more_groups, self.last_access
        entry_key, cached_sizes, heap, cap, used = self.entry_key, self.sizes, self.heap, self.capacity, self.used
        access, file_key, keys = rating.access, self.file_key, rating.keys()
        push, pop = heapq.heappush, heapq.heappop
        group_bytes, fast = self.group_bytes, not self.per_size
        hits = hit_bytes = staged = evicted = 0
        for t, oid, size, group in zip(times, ids, sizes, groups):
            if group == NO_GROUP:
                group = -2 - oid
            known = group_of.get(oid)
            if known is None:
                group_of[oid] = known = group
                if group_bytes is not None:
                    group_bytes[group] = group_bytes.get(group, 0) + size
            elif known != group:
                more_groups.setdefault(oid, {known}).add(group)
            if not self.per_job or last_access.get(group) != t:
                last_access[group] = t
                if group_bytes is None:
                    access(group, t)
                else:
                    access(group, t, 1.0, group_bytes.get(group, 0))
            if oid in cached_sizes:
                if oid in self.queue and self.queue_layout == LIRS:
                    self.lirs_hit(oid, group, size, used, t)
                elif oid in self.queue:
                    self.queue[oid] = READ
                hits += 1
                hit_bytes += size
                continue
            if size > cap:
                continue
            layout = getattr(rating, "layout", PLAIN)
            queues = layout in (PROBATION, LIRS)
            if (not queues or layout != self.queue_layout) and (self.queue or self.ghost):
                self.end_probation()
            if queues:
                self.queue_layout = layout
            if layout != PROBATION:
                self.settled = False
            elif not self.settled and getattr(rating, "settled", False):
                self.settle(t)
                self.settled = True
            if layout == LIRS:
                used, staged_now, evicted_now = self.lirs_stage(oid, group, size, used, t)
                staged += staged_now
                evicted += evicted_now
                continue
            if layout == PROBATION:
                used, staged_now, evicted_now = self.stage_on_probation(oid, size, used, t)
                staged += staged_now
                evicted += evicted_now
                continue
            entry = (keys[group] if fast and known == group and oid not in more_groups else file_key(oid), oid)
            if used + size > cap and heap and entry < heap[0]:
                continue
            if used + size > cap and layout == ASKING:  # the admission question
                before = rating.before(group)
                before = normalised_key(before, size) if self.per_size else before
                admitted = True
                while used + size > cap:
                    key, victim = heap[0]
                    current = self.current_key(victim)
                    if current != key:
                        pop(heap)
                        entry_key[victim] = current
                        push(heap, (current, victim))
                        continue
                    if group_of[victim] != group and before <= current:
                        admitted = False
                        break
                    pop(heap)
                    del entry_key[victim]
                    victim_size = cached_sizes.pop(victim)
                    used -= victim_size
                    evicted += victim_size
                if not admitted:
                    continue
            cached_sizes[oid] = size
            entry_key[oid] = entry[0]
            push(heap, entry)
            used += size
            while used > cap:
                key, victim = pop(heap)
                current = self.current_key(victim)
                if current != key:
                    entry_key[victim] = current
                    push(heap, (current, victim))
                    continue
                del entry_key[victim]
                victim_size = cached_sizes.pop(victim)
                used -= victim_size
                if victim == oid:
                    size = 0
                else:
                    evicted += victim_size
            staged += size
        rating.take_touched()
        self.used = used
        self.staged += staged
        self.evicted += evicted
        return hits, hit_bytes


def random_trace(seed: int, n: int = 6000, files: int = 400, grouped: bool = True) -> Trace:
    """Requests with a drifting hot set, scans, jobs (a group's files at one timestamp), files in several groups
    and a few files larger than any cache here."""
    rng = random.Random(seed)
    size_of = {f: rng.choice((1, 2, 3, 5, 8, 13, 40)) * 100 for f in range(files)}
    for big in rng.sample(range(files), 3):
        size_of[big] = 10**6
    home = {f: f // 7 for f in range(files)}
    times: list[float] = []
    ids: list[int] = []
    sizes: list[int] = []
    groups: list[int] = []
    t = 0.0
    while len(ids) < n:
        t += rng.choice((0.5, 1.0, 1.0, 3.0, 40.0))
        phase = len(ids) * 4 // n
        if rng.random() < 0.3:
            job = [rng.randrange(files)]  # a scan-like single read
        else:
            first = (phase * 90 + rng.randrange(60)) % files
            job = [first + k for k in range(rng.randint(1, 4)) if first + k < files]
        for f in job:
            group = home[f] if rng.random() < 0.9 else rng.randrange(files // 7)  # sometimes another group
            times.append(t)
            ids.append(f)
            sizes.append(size_of[f])
            groups.append(group if grouped else NO_GROUP)
    return times, ids, sizes, groups


def adaptive() -> AdaptiveLRFUPolicy:
    """An adaptive rating that decides often, so that a short trace switches several times."""
    return AdaptiveLRFUPolicy(half_life=10_000.0, half_lives=(5.0, 200.0, 10_000.0), decision_every=50,
                              patience=1, hysteresis=0.0)


def replay_both(trace: Trace, capacity: int, make_rating, chunk: int = 1000, **options) -> HTDAPolicy:
    """Replay ``trace`` through the compiled and the reference loop, chunk by chunk, asserting they agree."""
    compiled = HTDAPolicy(capacity, make_rating(), **options)
    reference = ReferenceHTDA(capacity, make_rating(), **options)
    for start in range(0, len(trace[0]), chunk):
        part = [column[start:start + chunk] for column in trace]
        assert compiled.replay(*part) == reference.replay(*part)
        assert (compiled.staged, compiled.evicted, compiled.used) == (reference.staged, reference.evicted,
                                                                      reference.used)
    assert compiled.contents() == reference.sizes
    assert compiled.rating.switches == reference.rating.switches if hasattr(compiled.rating, "switches") else True
    return compiled


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("capacity", [1_500, 6_000, 30_000])
def test_the_compiled_loop_matches_the_reference_with_the_adaptive_rating(seed, capacity):
    policy = replay_both(random_trace(seed), capacity, adaptive)
    assert policy.evicted > 0
    # it read every key from the kernel, which kept no dict of them (the reference's rating did)
    assert policy._compiled().reads_kernel and not policy.rating.mirror_keys and policy.rating._keys == {}
    if capacity == 6_000:
        assert policy.rating.switches >= 2  # the cache was re-keyed mid-replay


def test_an_adaptive_rating_that_overrides_access_is_called_through_it():
    # the compiled loop reaches the adaptive kernel directly (no Python call, keys read from its table) only when
    # access is the kernel's own: a subclass's access runs, and the cache comes out the same
    calls: list[Any] = []

    class Counting(AdaptiveLRFUPolicy):
        def access(self, group: Any, t: float, weight: float = 1.0, size: float = 1.0) -> None:
            calls.append(group)
            super().access(group, t, weight, size)

    assert adaptive()._c_api() is not None
    counting = Counting(half_life=10_000.0, half_lives=(5.0, 200.0, 10_000.0), decision_every=50, patience=1,
                        hysteresis=0.0)
    assert counting._c_api() is None
    trace = random_trace(4)
    direct, through_python = HTDAPolicy(6_000, adaptive()), HTDAPolicy(6_000, counting)
    assert direct.replay(*trace) == through_python.replay(*trace)
    assert direct.contents() == through_python.contents() and direct.rating.switches == counting.switches >= 2
    assert len(calls) >= len(set(trace[3])) > 10  # every group's accesses went through Counting.access
    assert not through_python._compiled().reads_kernel and counting.mirror_keys  # it read keys() instead


class AlwaysAsking(LRFUPolicy):
    """LRFU whose cache always asks the admission question (as an adaptive rating does when an admission shadow
    wins), with the keys before the latest access that the question needs."""

    layout = ASKING

    def __init__(self, half_life: float):
        super().__init__(half_life=half_life)
        self.befores: dict[Any, float] = {}

    def access(self, group: Any, t: float, weight: float = 1.0, size: float = 1.0) -> None:
        self.befores[group] = self.keys().get(group, NEVER)
        super().access(group, t, weight, size)

    def before(self, group: Any) -> float:
        return self.befores.get(group, NEVER)


@pytest.mark.parametrize("options", [{}, {"per_size": True}, {"accesses": "request"}])
def test_asking_the_admission_question_keeps_out_what_was_read_once_as_the_reference_does(options):
    trace = random_trace(10)
    asking = replay_both(trace, 5_000, lambda: AlwaysAsking(half_life=30.0), **options)
    plain = replay_both(trace, 5_000, lambda: LRFUPolicy(half_life=30.0), **options)
    # files whose group was never read before do not displace anything: fewer bytes staged and evicted
    assert asking.evicted > 0 and asking.staged < plain.staged and asking.evicted < plain.evicted


def test_an_adaptive_rating_switches_the_question_on_and_off_in_the_compiled_loop_as_in_the_reference():
    policy = replay_both(random_trace(11, n=12_000), 6_000, adaptive)
    assert {layout for _, _, layout in policy.rating.history} >= {"asking", "plain"}


class OnProbation(LRFUPolicy):
    """LRFU whose cache puts every new file on probation (as an adaptive rating does when a probation shadow
    wins)."""

    layout = PROBATION


def hot_files_among_a_scan(n: int = 8000, seed: int = 12) -> Trace:
    """Half the requests for 40 hot files, half a scan of files read once or twice in a row."""
    rng = random.Random(seed)
    times, ids, sizes = [], [], []
    scan = 1000
    for i in range(n):
        if rng.random() < 0.5:
            oid = rng.randrange(40)
        elif ids and ids[-1] >= 1000 and rng.random() < 0.3:
            oid = ids[-1]  # read again at once
        else:
            scan += 1
            oid = scan
        times.append(float(i))
        ids.append(oid)
        sizes.append(100 + oid % 7)
    return times, ids, sizes, [NO_GROUP] * n


@pytest.mark.parametrize("options", [{}, {"per_size": True}, {"accesses": "request"}])
def test_new_files_on_probation_leave_the_hot_ones_in_place_as_in_the_reference(options):
    trace = hot_files_among_a_scan()
    on_probation = replay_both(trace, 5_000, lambda: OnProbation(half_life=5.0), **options)
    plain = replay_both(trace, 5_000, lambda: LRFUPolicy(half_life=5.0), **options)
    # the scan passes through the queue (10 % of the bytes): the hot files stay, and what is read again at once
    # is still hit there
    assert on_probation.replay(*trace)[1] > 1.2 * plain.replay(*trace)[1]


def passes_over_datasets(passes: int = 5, grouped: bool = True) -> Trace:
    """Passes over 10 datasets of 10 files (100 bytes each), a job per file, each job followed by a file read once
    (its own group): a file's next read is a pass later, its dataset's the next job."""
    times, ids, groups = [], [], []
    once = 10_000
    for _ in range(passes):
        for oid in range(100):
            times += [float(len(times)), float(len(times) + 1)]
            ids += [oid, once]
            groups += [oid // 10 if grouped else NO_GROUP, NO_GROUP]
            once += 1
    return times, ids, [100] * len(ids), groups


@pytest.mark.parametrize("options", [{}, {"accesses": "request"}])
def test_a_queued_file_whose_dataset_is_read_again_by_a_later_job_stays_as_in_the_reference(options):
    def file_hits(grouped: bool) -> tuple[int, set[int]]:
        trace = passes_over_datasets(grouped=grouped)
        replay_both(trace, 12_000, lambda: OnProbation(half_life=50.0), **options)
        policy = HTDAPolicy(12_000, OnProbation(half_life=50.0), **options)
        return policy.replay(*trace)[0], set(policy.contents())

    (by_dataset, held), (by_file, _) = file_hits(True), file_hits(False)
    # the shadows replay datasets: one read again by the next job is read again, whichever file it read.  The
    # cache asks the same of a queued file, so in the first pass a dataset's files go to the heap, but for its
    # last (the next job of its dataset comes a pass later), and every later pass hits them; a file of its own is
    # read again only by the next pass, which misses it (it comes back from the ghost list)
    assert by_dataset == 4 * 100 - 10 and by_file == 3 * 100
    assert set(range(100)) <= held


def test_an_adaptive_rating_moves_its_cache_on_and_off_probation_as_the_reference_does():
    trace = hot_files_among_a_scan(12_000)
    trace[1][6000:] = [oid % 60 for oid in trace[1][6000:]]  # then a working set of 60 files, all read often
    policy = replay_both(trace, 3_000, adaptive, chunk=500)
    assert {layout for _, _, layout in policy.rating.history} >= {"probation", "plain"}


class AlwaysLIRS(AlwaysAsking):
    """LRFU whose cache is laid out as LIRS (as an adaptive rating's is when a LIRS shadow wins)."""

    layout = LIRS


def a_loop_one_file_longer_than_the_cache(laps: int = 10, files: int = 101) -> Trace:
    """Laps over ``files`` files of 100 bytes, in order, a request a second; every 20th request a file read once."""
    times, ids = [], []
    once = 10_000
    for _ in range(laps):
        for oid in range(files):
            ids.append(oid)
            if oid % 20 == 19:
                ids.append(once)
                once += 1
    times = [float(i) for i in range(len(ids))]
    return times, ids, [100] * len(ids), [NO_GROUP] * len(ids)


@pytest.mark.parametrize("options", [{}, {"per_size": True}, {"accesses": "request"}])
def test_a_lirs_cache_keeps_most_of_a_loop_larger_than_itself_as_the_reference_does(options):
    """LRU (LRFU at a short half-life) misses every request of a loop longer than the cache; as LIRS the cache
    protects 99 % of its bytes and cycles the rest through its queue, so it hits most of every lap after the
    first, and the files read once pass through the queue."""
    trace = a_loop_one_file_longer_than_the_cache()
    lirs = replay_both(trace, 10_000, lambda: AlwaysLIRS(half_life=1.0), **options)
    lirs_hits = HTDAPolicy(10_000, AlwaysLIRS(half_life=1.0), **options).replay(*trace)[0]
    plain_hits = HTDAPolicy(10_000, LRFUPolicy(half_life=1.0), **options).replay(*trace)[0]
    assert plain_hits == 0 and lirs_hits >= 9 * 95
    assert set(lirs.contents()) < set(range(101))  # what it holds at the end is of the loop, not read once


def test_an_adaptive_rating_moves_its_cache_to_lirs_and_back_as_the_reference_does():
    trace = a_loop_one_file_longer_than_the_cache(laps=20)
    drifting = hot_files_among_a_scan(6_000)
    trace = tuple(first + [x + (len(trace[0]) if column == 0 else 0) for x in second]
                  for column, (first, second) in enumerate(zip(trace, drifting)))
    policy = replay_both(trace, 3_000, adaptive, chunk=500)
    assert {layout for _, _, layout in policy.rating.history} == {"plain", "asking", "probation", "lirs"}


class PlainThenSettled(AlwaysAsking):
    """LRFU whose cache is plain until ``switch``, then on probation, settled from ``settle`` on (as an adaptive
    rating's cache is once its probation shadow leads the slow totals)."""

    def __init__(self, half_life: float, switch: float, settle: float):
        super().__init__(half_life)
        self.switch, self.settle, self.now = switch, settle, 0.0

    def access(self, group: Any, t: float, weight: float = 1.0, size: float = 1.0) -> None:
        self.now = t
        super().access(group, t, weight, size)

    @property
    def layout(self) -> int:  # type: ignore[override]
        return PROBATION if self.now >= self.switch else PLAIN

    @property
    def settled(self) -> bool:
        return self.now >= self.settle


def old_scan_then_hot_files(n: int = 9000, seed: int = 13) -> Trace:
    """A scan of files read once, then a few hot files among files read once and never again; a fifth of the
    second part reads files of the first twice in a row (they are read again, in the queue)."""
    rng = random.Random(seed)
    times, ids = [], []
    for i in range(n):
        if i < n // 3:
            oid = 10_000 + i  # the scan the plain layout admits
        elif rng.random() < 0.5:
            oid = rng.randrange(30)
        else:
            oid = 100_000 + i  # read once
        times.append(float(i))
        ids.append(oid)
    return times, ids, [100] * n, [NO_GROUP] * n


@pytest.mark.parametrize("options", [{}, {"per_size": True}, {"accesses": "request"}])
def test_a_cache_settled_on_probation_queues_what_it_held_read_once_as_the_reference_does(options):
    trace = old_scan_then_hot_files()
    # 3,000 files of the scan fill the cache (200,000 bytes: 2,000 files) while it is plain; then it goes on
    # probation, and settles at once or never
    settled = replay_both(trace, 200_000, lambda: PlainThenSettled(5.0, switch=3000.0, settle=3000.0), **options)
    unsettled = replay_both(trace, 200_000, lambda: PlainThenSettled(5.0, switch=3000.0, settle=1e9), **options)
    scan_left = [sum(10_000 <= oid < 13_000 for oid in p.contents()) for p in (settled, unsettled)]
    # unsettled, the heap gives room only to the files read again in the queue (the 30 hot ones): the scan read
    # once stays for good; settled, it went through the queue and is gone
    assert scan_left[0] == 0 and scan_left[1] > 1_000
    assert set(range(30)) <= set(settled.contents())


def test_an_error_while_settling_leaves_every_cached_file_in_the_cache():
    class FailingOnce(PlainThenSettled):
        fail = True

        def before(self, group: Any) -> float:
            if self.now >= self.settle and self.fail:
                self.fail = False
                raise RuntimeError("the rating failed")
            return super().before(group)

    times, ids, sizes, groups = old_scan_then_hot_files()
    policy = HTDAPolicy(200_000, FailingOnce(5.0, switch=3000.0, settle=3000.0))
    policy.replay(times[:3000], ids[:3000], sizes[:3000], groups[:3000])
    held = policy.contents()
    with pytest.raises(RuntimeError, match="the rating failed"):
        policy.replay(times[3000:3010], ids[3000:3010], sizes[3000:3010], groups[3000:3010])
    assert set(held) <= set(policy.contents())  # nothing was lost from the heap on the way out
    policy.replay(times[3010:], ids[3010:], sizes[3010:], groups[3010:])  # it settles at the next miss, and goes on
    assert not any(10_000 <= oid < 13_000 for oid in policy.contents())


@pytest.mark.parametrize("options", [{}, {"per_size": True}, {"accesses": "request"}])
def test_the_compiled_loop_matches_the_reference_with_a_fixed_half_life(options):
    policy = replay_both(random_trace(4), 5_000, lambda: LRFUPolicy(half_life=30.0), **options)
    assert policy.evicted > 0


@pytest.mark.parametrize("options", [{"per_size": True}, {"accesses": "request"}])
def test_the_compiled_loop_matches_the_reference_with_options_and_switches(options):
    policy = replay_both(random_trace(5), 6_000, adaptive, **options)
    assert policy.rating.switches >= 1


def test_the_compiled_loop_matches_the_reference_without_groups():
    policy = replay_both(random_trace(6, grouped=False), 4_000, adaptive, chunk=777)
    assert policy.evicted > 0 and policy.rating.switches >= 1


def test_ids_whose_hashes_share_their_index_tag_and_home_are_different_files_and_groups():
    # the tables' index keeps 32 bits of an id's hash, not the id: ids k apart, where k times the hash's multiplier
    # is 1 (mod 2**64), have hashes 1 apart, so the same tag and the same home slot; each must still find its own
    # file and group record (a probe that trusted the tag would take one for the other)
    inverse = pow(0x9E3779B97F4A7C15, -1, 2**64)
    base = 12_345
    twins = [(base + j * inverse) % 2**64 for j in range(4)]
    twins = [i - 2**64 if i >= 2**63 else i for i in twins]  # as int64
    rng = random.Random(8)
    ids = [rng.choice(twins) for _ in range(400)] + list(range(100, 700))  # ... and enough others to grow the tables
    times = [float(t) for t in range(len(ids))]
    sizes = [100 + 10 * twins.index(i) if i in twins else 100 for i in ids]
    trace = (times, ids, sizes, ids)
    policy = replay_both(trace, 1_000, lambda: LRFUPolicy(half_life=30.0), chunk=250)
    assert policy.evicted > 0
    held = replay_both(trace, 10**9, lambda: LRFUPolicy(half_life=30.0)).contents()
    assert {i: held[i] for i in twins} == {i: 100 + 10 * j for j, i in enumerate(twins)}


def test_a_cache_of_nothing_and_of_everything():
    trace = random_trace(7, n=2000)
    assert replay_both(trace, 0, adaptive).contents() == {}
    everything = replay_both(trace, 10**9, adaptive)
    assert everything.evicted == 0 and everything.staged == sum(everything.contents().values())


def test_the_compiled_loop_takes_any_sequences_and_reports_a_bad_key():
    times, ids, sizes, groups = random_trace(8, n=500)
    policy = HTDAPolicy(2_000, LRFUPolicy(half_life=30.0))
    reference = ReferenceHTDA(2_000, LRFUPolicy(half_life=30.0))
    assert policy.replay(tuple(times), iter(ids), sizes, groups) == reference.replay(times, ids, sizes, groups)

    class TextKeys(LRFUPolicy):
        def access(self, group: Any, t: float, weight: float = 1.0, size: float = 1.0) -> None:
            super().access(group, t, weight, size)
            self.keys()[group] = "high"  # type: ignore[assignment]

    with pytest.raises(TypeError, match="keys must be floats"):
        HTDAPolicy(2_000, TextKeys(half_life=30.0)).replay(times, ids, sizes, groups)


def test_the_compiled_loop_reads_arrays_of_its_types_and_one_length_only():
    loop = HTDAPolicy(2_000, LRFUPolicy(half_life=30.0))._compiled()
    times, ids = np.zeros(3), np.arange(3, dtype=np.int64)
    for bad in ((times, ids.astype(np.float64), ids, ids), (times.astype(np.float32), ids, ids, ids),
                (times, ids, ids[:2], ids), (times, ids[::2], ids, ids), (list(times), ids, ids, ids)):
        with pytest.raises((TypeError, BufferError, ValueError)):
            loop.replay(*bad, 0)
    assert loop.replay(times, ids, ids + 1, np.full(3, NO_GROUP, dtype=np.int64), 0)[0] == 0  # and it still works


def test_a_rating_without_the_adaptive_hooks_is_called_as_before():
    calls: list[tuple] = []

    class Recording(LRFUPolicy):
        def access(self, group: Any, t: float, weight: float = 1.0, size: float = 1.0) -> None:
            calls.append((group, t) if (weight, size) == (1.0, 1.0) else (group, t, weight, size))
            super().access(group, t, weight, size)

    rating: RatingPolicy[Any] = Recording(half_life=30.0)
    HTDAPolicy(10_000, rating).replay([0.0, 0.0, 1.0], [0, 1, 0], [10, 10, 10], [5, 5, NO_GROUP])
    assert calls == [(5, 0.0), (-2, 1.0)]  # one access per job; a file without a group is its own group


def test_a_switch_between_replays_re_keys_the_cache_as_the_reference_does():
    """The rating may switch outside a replay (accesses recorded by someone else): the cache re-keys then too."""
    times, ids, sizes, groups = random_trace(9)
    half = len(times) // 2
    compiled, reference = HTDAPolicy(6_000, adaptive()), ReferenceHTDA(6_000, adaptive())
    for policy in (compiled, reference):
        policy.replay(times[:half], ids[:half], sizes[:half], groups[:half])
    switches = compiled.rating.switches
    assert compiled.rating.half_life == 200.0
    for policy in (compiled, reference):  # a working set that moves on: the short half-life wins
        rng = random.Random(1)
        for i in range(3000):
            group = 300_000 + (i // 300) * 20 + rng.randrange(20)
            policy.rating.access(group, times[half - 1] + 1 + i, 1.0, 300)
    assert compiled.rating.switches == reference.rating.switches > switches
    assert compiled.rating.half_life == reference.rating.half_life == 5.0  # every key changed
    rest = (times[half:], ids[half:], sizes[half:], groups[half:])
    assert compiled.replay(*rest) == reference.replay(*rest)
    assert (compiled.staged, compiled.evicted, compiled.contents()) == (reference.staged, reference.evicted,
                                                                         reference.sizes)

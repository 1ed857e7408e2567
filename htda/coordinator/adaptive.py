"""``lrfu-adaptive``: LRFU whose half-life follows the workload, chosen online by shadow caches.

No fixed half-life wins everywhere (``docs/simulator.rst``): a short one
(LRU-like) wins where the working set drifts, a long one (LFU-like) where a
stable popular set is read among scans.  This policy keeps the LRFU key of
every group at each of a few candidate half-lives (:data:`DEFAULT_HALF_LIVES`)
and ranks with the one that is currently best:

- **keys at every half-life**: LRFU keys are log-scaled sums
  (:mod:`.rating`), so an access updates each candidate's key of the group in
  O(1); the *active* candidate's keys are the policy's keys
  (:meth:`~.rating.RatingPolicy.keys`), the others wait in their own tables;
- **shadow caches** (miniature simulations, as in SHARDS: C. Waldspurger et
  al., *Efficient MRC Construction with SHARDS*, FAST'15, and *Cache
  Modeling and Optimization using Miniature Simulations*, ATC'17): the groups
  whose mixed hash falls below a *rate* of the hash space are replayed
  through one small cache per candidate, of *rate* times the real cache's
  size (:meth:`set_capacity`), evicting the lowest key of that candidate;
  each counts the bytes it would have hit.  The rate starts at
  ``sample_rate`` and halves whenever more than ``max_sampled`` groups are
  sampled (SHARDS' fixed-size variant, by halving): a workload of few large
  groups is replayed whole, one of millions of small ones by a sample of
  bounded cost;
- **decisions** (:class:`DampedChoice`): every ``decision_every`` sampled
  accesses the hit counts of the round are added to exponentially decayed
  totals (``decay``); a candidate replaces the active one only if its total
  beats the active one's by more than ``hysteresis`` times the smaller of the
  active one's hits and misses (so a small relative gain counts when the
  active one misses little, as in a large cache), in ``patience`` decisions in
  a row, so that the choice does not flap on noise.

Time is only ever the accesses' own timestamps (the keys); decisions count
accesses, never seconds, so a replay gives the same choices whatever the
clock.  When the active half-life changes every key changes (all groups are
*touched*, :meth:`~.rating.RatingPolicy.take_touched`) and ``on_switch``, if
set, is called: a cache ordered by the old keys re-sorts itself.

Without :meth:`set_capacity` (or with 0) there are no shadow caches and the
policy is plain LRFU at ``half_life``.  Sizes are whatever unit the capacity
is in: bytes in the simulator; the coordinator, which records accesses
without sizes, counts groups (size 1 each) against its number of placed
groups.

:meth:`AdaptiveLRFUPolicy.candidates` shows each candidate as the policy sees
it (its keys, its shadow cache, its hits), a copy for reading: the tests and
an operator's investigation read the policy through it, never through its
tables.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from .rating import NEVER, G, RatingPolicy, add_key, log_add

__all__ = ["AdaptiveLRFUPolicy", "Candidate", "DEFAULT_HALF_LIVES", "DampedChoice", "ShadowCache", "sample_hash"]

#: candidate half-lives: 5 minutes, 1 hour, 1 day, 7 days
DEFAULT_HALF_LIVES = (300.0, 3600.0, 86400.0, 604800.0)

_MIX1 = 0x9E3779B97F4A7C15
_MIX2 = 0xBF58476D1CE4E5B9
_M64 = (1 << 64) - 1


def sample_hash(group: object) -> int:
    """A well-spread 64-bit hash of ``group`` (splitmix64's finaliser over Python's hash): the group is sampled
    while it is below the sampling rate times 2**64."""
    h = (hash(group) * _MIX1) & _M64
    h ^= h >> 29
    h = (h * _MIX2) & _M64
    return h ^ (h >> 32)


class ShadowCache:
    """A miniature cache of the sampled groups, evicting the lowest key of one candidate half-life.

    ``resident`` maps each group it holds to its size when last accessed, ``used`` is their sum, ``hits`` the
    bytes hit in the current round; ``heap`` holds ``(key when pushed, group)`` of each resident, lazily: a key
    that grew since is pushed again when it comes up (keys only grow)."""

    __slots__ = ("keys", "resident", "heap", "used", "hits")

    def __init__(self, keys: dict):
        self.keys = keys  # this candidate's key table (shared with the policy)
        self.resident: dict[Any, float] = {}
        self.heap: list[tuple[float, Any]] = []
        self.used = 0.0
        self.hits = 0.0

    def evict(self, capacity: float) -> None:
        """Drop the lowest keys until the residents fit ``capacity``."""
        heap, keys, resident = self.heap, self.keys, self.resident
        while self.used > capacity and heap:
            key, victim = heap[0]
            current = keys[victim]
            if current != key:  # accessed since it was pushed: keys only grow, re-push it
                heapq.heapreplace(heap, (current, victim))
                continue
            heapq.heappop(heap)
            self.used -= resident.pop(victim)

    def discard(self, groups: Collection[Any]) -> None:
        """Drop ``groups`` (those resident) without counting anything: they left the sample, or were forgotten."""
        self.resident = {g: size for g, size in self.resident.items() if g not in groups}
        self.heap = [(key, g) for key, g in self.heap if g in self.resident]
        heapq.heapify(self.heap)
        self.used = sum(self.resident.values())


class DampedChoice:
    """Which candidate ranks, from rounds of the candidates' shadow hits: decayed totals, a margin, patience (see
    the module docstring).  ``totals`` are each candidate's decayed hits, ``requested`` the decayed bytes
    asked for (each candidate's hits plus misses), ``challenger`` the candidate that won the latest rounds
    (-1: none) and ``wins`` how many rounds in a row it won."""

    def __init__(self, candidates: int, hysteresis: float = 0.05, patience: int = 2, decay: float = 0.5):
        self.hysteresis, self.patience, self.decay = hysteresis, patience, decay
        self.totals = [0.0] * candidates
        self.requested = 0.0
        self.challenger = -1
        self.wins = 0

    def round(self, hits: Sequence[float], requested: float, active: int) -> int | None:
        """Take one round: each candidate's bytes hit and the bytes asked for, while ``active`` ranks.  The
        candidate to switch to, once one beat ``active`` by the margin in ``patience`` rounds in a row; else
        None."""
        decay = self.decay
        totals = self.totals = [decay * total + hit for total, hit in zip(self.totals, hits)]
        self.requested = decay * self.requested + requested
        best = max(range(len(totals)), key=totals.__getitem__)
        mine = totals[active]
        if best == active or totals[best] - mine <= self.hysteresis * min(mine, self.requested - mine):
            self.challenger, self.wins = -1, 0
            return None
        self.wins = self.wins + 1 if best == self.challenger else 1
        self.challenger = best
        if self.wins < self.patience:
            return None
        self.challenger, self.wins = -1, 0
        return best


@dataclass(frozen=True)
class Candidate:
    """One candidate half-life as :meth:`AdaptiveLRFUPolicy.candidates` shows it: copies, for reading."""

    half_life: float
    #: whether the policy ranks with it now
    active: bool
    #: every group's key at this half-life
    keys: dict[Any, float]
    #: the groups its shadow cache holds, with their sizes, and their total size
    residents: dict[Any, float]
    used: float
    #: bytes its shadow cache hit in the current round, and its decayed hits of past rounds (its score)
    hits: float
    total: float


class AdaptiveLRFUPolicy(RatingPolicy[G]):
    """LRFU at the candidate half-life whose shadow cache hits most lately (see the module docstring)."""

    name = "lrfu-adaptive"

    def __init__(self, half_life: float = 86400.0, epoch: float = 0.0,
                 half_lives: Sequence[float] = DEFAULT_HALF_LIVES, sample_rate: float = 1.0,
                 max_sampled: int = 16384, capacity: float = 0.0, decision_every: int = 1000,
                 hysteresis: float = 0.05, patience: int = 2, decay: float = 0.5):
        super().__init__(half_life, epoch)
        candidates = sorted({float(h) for h in half_lives} | {self.half_life})
        for wrong, message in (
                (any(not h > 0 for h in candidates), "half_lives must be > 0 seconds"),
                (not 0.0 < sample_rate <= 1.0, "sample_rate must be in (0, 1]"),
                (min(decision_every, patience, max_sampled) < 1,
                 "decision_every, patience and max_sampled must be >= 1"),
                (hysteresis < 0 or not 0.0 <= decay < 1.0, "hysteresis must be >= 0 and decay in [0, 1)")):
            if wrong:
                raise ValueError(message)
        self.half_lives = candidates
        self.sample_rate = sample_rate
        self.max_sampled = max_sampled
        self._sampled_groups: set = set()  # the distinct groups sampled so far (at most max_sampled)
        # every group seen with shadows on -> whether it is in the sample now: its hash is mixed once, not on every
        # access (the rate only halves, so a group out of the sample stays out; :meth:`_halve_rate` updates the rest)
        self._in_sample: dict[G, bool] = {}
        self.decision_every = decision_every
        self.choice = DampedChoice(len(candidates), hysteresis, patience, decay)  # the decisions; its totals: scores()
        self.active = candidates.index(self.half_life)
        # one key table per candidate; the active one is self._keys (the same dict object for ever: a reader may
        # hold it, as the simulator does)
        self._tables: list[dict[G, float]] = [self._keys if i == self.active else {} for i in range(len(candidates))]
        self._inverse = [1.0 / h for h in candidates]
        self._key_rules = list(zip(self._tables, self._inverse))  # (key table, 1 / half-life) of each candidate
        self._threshold = int(sample_rate * (1 << 64))
        self._shadows = [ShadowCache(table) for table in self._tables]
        self._shadow_capacity = 0.0
        self._sampled = 0  # sampled accesses in the current round
        self._round_bytes = 0.0  # their sizes
        self._now = epoch  # the latest access time seen (to translate restored keys)
        self.switches = 0
        self.history: deque[tuple[float, float]] = deque(maxlen=100)  # the latest (time of a switch, new half-life)
        self.on_switch: Callable[[], None] | None = None
        self.set_capacity(capacity)

    # -- configuration ------------------------------------------------------
    def set_capacity(self, capacity: float) -> None:
        """The real cache's size (bytes, or groups when accesses carry no size): the shadows get ``sample_rate``
        of it.  0 turns the adaptation off."""
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = float(capacity)
        self._shadow_capacity = self.sample_rate * self.capacity
        for shadow in self._shadows:
            shadow.evict(self._shadow_capacity)

    # -- updating -------------------------------------------------------------
    def _key_after(self, key: float, t: float, weight: float) -> float:  # the active candidate's rule
        return log_add(key, math.log2(weight) + (t - self.epoch) / self.half_life)

    def offset(self, now: float) -> float:
        return (now - self.epoch) / self.half_life

    def access(self, group: G, t: float, weight: float = 1.0, size: float = 1.0) -> None:
        """Record one access of ``group`` at ``t`` worth ``weight``; ``size`` is the group's size (in the unit of
        the capacity) for the shadow caches."""
        if weight == 1.0:
            lw = 0.0
        elif weight > 0:
            lw = math.log2(weight)
        else:
            raise ValueError("access weight must be > 0")
        self._now = t
        base = t - self.epoch
        if group in self._keys:
            for table, inverse in self._key_rules:
                add_key(table, group, lw + base * inverse)
        else:  # a new group (every table has the same groups): its first key at each candidate, no log-add
            for table, inverse in self._key_rules:
                table[group] = lw + base * inverse
        self._touched.add(group)
        if self._shadow_capacity:
            sampled = self._in_sample.get(group)
            if sampled is None:
                sampled = self._first_sampled(group)
            if sampled:
                self._replay_sampled(group, size)

    def _first_sampled(self, group: G) -> bool:
        """Whether ``group``, seen for the first time with shadows on, is in the sample (which may halve)."""
        sampled = self._in_sample[group] = sample_hash(group) < self._threshold
        if sampled:
            self._sampled_groups.add(group)
            if len(self._sampled_groups) > self.max_sampled:
                self._halve_rate()
                sampled = self._in_sample[group]
        return sampled

    def _replay_sampled(self, group: G, size: float) -> None:
        """One access of a sampled group through every shadow cache; a decision every ``decision_every``."""
        capacity = self._shadow_capacity
        push = heapq.heappush
        for shadow in self._shadows:  # a hit counts its bytes; a miss stages the group and evicts down to capacity
            resident = shadow.resident
            old = resident.get(group)
            if old is not None:
                shadow.hits += size
                if old != size:
                    shadow.used += size - old
                    resident[group] = size
            elif size <= capacity:
                entry, heap = (shadow.keys[group], group), shadow.heap
                if shadow.used <= capacity < shadow.used + size and heap and entry < heap[0]:
                    continue  # the lowest entry: evict would drop it first and nothing else, so it never enters
                resident[group] = size
                push(heap, entry)
                shadow.used += size
                if shadow.used > capacity:
                    shadow.evict(capacity)
        self._sampled += 1
        self._round_bytes += size
        if self._sampled >= self.decision_every:
            self._decide()

    def _halve_rate(self) -> None:
        """Sample half as many groups: those above the new threshold leave the sample and the shadows."""
        self.sample_rate /= 2
        self._threshold //= 2
        self._shadow_capacity = self.sample_rate * self.capacity
        threshold = self._threshold
        left = {g for g in self._sampled_groups if sample_hash(g) >= threshold}
        self._sampled_groups -= left
        self._in_sample.update(dict.fromkeys(left, False))
        for shadow in self._shadows:
            shadow.discard(left)
            shadow.evict(self._shadow_capacity)

    def set_key(self, group: G, key: float) -> None:
        """Restore the active key of ``group``; the other candidates get the key of the same score at the latest
        access time seen (an approximation: the history behind the key is gone)."""
        super().set_key(group, key)
        active_h = self.half_life
        ref = self._now - self.epoch
        for i, (table, h) in enumerate(zip(self._tables, self.half_lives)):
            if i != self.active:
                table[group] = NEVER if key == NEVER else key - ref / active_h + ref / h

    def forget(self, group: G) -> None:
        super().forget(group)
        for table in self._tables:
            table.pop(group, None)
        self._sampled_groups.discard(group)
        self._in_sample.pop(group, None)
        for shadow in self._shadows:
            if group in shadow.resident:
                shadow.discard((group,))

    # -- choosing -------------------------------------------------------------
    def scores(self) -> list[float]:
        """Each candidate's decayed shadow hits (the last decision's totals)."""
        return list(self.choice.totals)

    def _decide(self) -> None:
        self._sampled = 0
        hits = [shadow.hits for shadow in self._shadows]
        for shadow in self._shadows:
            shadow.hits = 0.0
        requested, self._round_bytes = self._round_bytes, 0.0
        to = self.choice.round(hits, requested, self.active)
        if to is not None:
            self._switch(to)

    def _switch(self, to: int) -> None:
        """Rank with candidate ``to`` from now on: its keys move into the active table (the same dict object)."""
        old = self.active
        self._tables[old] = dict(self._keys)
        self._keys.clear()
        self._keys.update(self._tables[to])
        self._tables[to] = self._keys
        self._shadows[old].keys = self._tables[old]
        self._shadows[to].keys = self._keys
        self._key_rules = list(zip(self._tables, self._inverse))
        self.active = to
        self.half_life = self.half_lives[to]
        self.switches += 1
        self.history.append((self._now, self.half_life))
        self._touched.update(self._keys)
        if self.on_switch is not None:
            self.on_switch()

    # -- reading --------------------------------------------------------------
    @property
    def sampled_groups(self) -> int:
        """How many groups the shadow caches sample now (at most ``max_sampled``)."""
        return len(self._sampled_groups)

    def candidates(self) -> list[Candidate]:
        """Each candidate half-life, shortest first: its keys, its shadow cache and its hits, copied (every key
        of every group: for tests and investigations, not for a hot path)."""
        return [Candidate(half_life=h, active=i == self.active, keys=dict(table), residents=dict(shadow.resident),
                          used=shadow.used, hits=shadow.hits, total=total)
                for i, (h, table, shadow, total) in enumerate(zip(self.half_lives, self._tables, self._shadows,
                                                                 self.choice.totals))]

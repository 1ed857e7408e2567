"""Admission: whether a group that is not cached yet may displace cached ones (TinyLFU).

The rating (:mod:`.rating`) orders what is cached: the lowest key goes first.
It cannot tell a group read once, by a scan, from one that is read again and
again but not lately: a new group enters with the key of a fresh access, which
beats every group not read in a while, so a scan of groups read once pushes
out the working set.  An *admission filter* asks a second question before a
new group displaces others: has it been read more often, lately, than the
groups it would push out?

:class:`FrequencySketch` answers it as TinyLFU does (G. Einziger, R. Friedman
and B. Manes, *TinyLFU: A Highly Efficient Cache Admission Policy*, ACM
Transactions on Storage 13(4), 2017; the layout of Caffeine's
``FrequencySketch``):

- a **count-min sketch**: ``depth`` rows of ``width`` counters of at most 15
  (4 bits' worth, kept a byte each); an access adds one to the group's counter
  in each row, the estimate is the least of them (collisions only raise it);
- a **doorkeeper**: a Bloom filter that takes a group's first access instead
  of the counters, so that groups read once (the bulk of a scan) never reach
  them; the estimate adds one for a group the doorkeeper knows;
- **aging**: after ``sample_factor * width`` accesses every counter is halved
  and the doorkeeper cleared, so the sketch counts a sliding sample of the
  recent accesses and a group that was popular once fades.  The sample is
  measured in accesses, never in seconds: the same accesses give the same
  estimates whatever the clock.

:class:`TinyLFUAdmission` is the rule: a candidate group is admitted if it is
estimated more frequent than the group of every victim it would displace
(ties keep the victim, as in Caffeine).  Victims of the candidate's own group
are not asked about.

New data must be able to enter before it can prove itself, so a *window*
share of the cache takes new groups unasked (W-TinyLFU's window, as in
Caffeine); :class:`WindowClimber` tunes that share online by hill climbing
on the hit ratio of successive samples of requests.  The coordinator applies
the rule in its placement (:func:`~htda.coordinator.placement.place`'s
``admit`` and ``window``); the simulator's HTDA policy replays the same
objects in a demand-fetched cache (:mod:`htda.simulator.htda_policy`).

Admission policies are chosen by name (the coordinator's ``admission``
option, the simulator's ``--admission``): :data:`ADMISSIONS`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np

__all__ = ["ADMISSIONS", "FrequencySketch", "TinyLFUAdmission", "WindowClimber", "make_admission"]

#: the admission policies by name: "none" admits everything (the rating alone decides)
ADMISSIONS = ("tinylfu", "none")

_MIX1 = 0x9E3779B97F4A7C15  # 64-bit odd constants (golden ratio, splitmix64) spreading a hash over the rows
_MIX2 = 0xBF58476D1CE4E5B9
_M64 = (1 << 64) - 1
_MAX_COUNT = 15
_DOOR_BITS = 8  # doorkeeper bits per counter of a row: ~2 % false positives with a width's worth of groups in it


def _mixed(key: Hashable) -> tuple[int, int]:
    """The two 64-bit mixes of ``key``'s hash that place it in the sketch."""
    h = (hash(key) * _MIX1) & _M64
    h ^= h >> 31
    return h, (h * _MIX2) & _M64


class FrequencySketch:
    """A count-min sketch of 4-bit-ish counters with a doorkeeper and periodic halving (see the module docstring).

    ``width`` is rounded up to a power of two (at least 64); it should be of the order of the number of
    groups the cache holds (:meth:`ensure_width` grows it).  Memory: 12 bytes per unit of width (four rows
    of counters and a doorkeeper of eight bits per unit, each a byte).
    """

    depth = 4

    def __init__(self, width: int = 1024, sample_factor: int = 10):
        if sample_factor < 1:
            raise ValueError("sample_factor must be >= 1")
        self.sample_factor = sample_factor
        self.width = 0
        self._resize(width)

    def _resize(self, width: int) -> None:
        width = max(64, 1 << (max(1, int(width)) - 1).bit_length())
        self.width = width
        self._mask = width - 1
        self._counters = bytearray(self.depth * width)
        self._door = bytearray(_DOOR_BITS * width)  # one byte per bit: simpler and faster than packing in Python
        self._door_mask = _DOOR_BITS * width - 1
        self.sample_size = self.sample_factor * width
        self.samples = 0  # accesses since the last halving

    def ensure_width(self, groups: int) -> None:
        """Grow (never shrink) to fit about ``groups`` groups; growing starts the counts afresh, as Caffeine does."""
        if groups > self.width:
            self._resize(groups)

    def tables(self) -> tuple[bytearray, bytearray]:
        """The counters (``depth`` rows of ``width`` bytes, one after another) and the doorkeeper (a byte a bit,
        eight a unit of width), which the simulator's compiled cache counts into as :meth:`increment` does
        (``htda/simulator/_replay.c``).  Growing the sketch replaces them."""
        return self._counters, self._door

    def increment(self, key: Hashable) -> None:
        """Count one access of ``key``.  Its column in each row comes from two 64-bit mixes of its hash, each
        cut in halves; the doorkeeper's two bits from other bits of the same mixes."""
        h, g = _mixed(key)
        mask, door, dmask = self._mask, self._door, self._door_mask
        x = (h >> 16) & dmask
        y = (g >> 8) & dmask
        if not (door[x] and door[y]):
            door[x] = door[y] = 1  # the first access, as far as the doorkeeper knows: the counters stay
        else:
            counters, w = self._counters, self.width
            a = h & mask
            if counters[a] < _MAX_COUNT:
                counters[a] += 1
            b = w + ((h >> 32) & mask)
            if counters[b] < _MAX_COUNT:
                counters[b] += 1
            c = 2 * w + (g & mask)
            if counters[c] < _MAX_COUNT:
                counters[c] += 1
            d = 3 * w + ((g >> 32) & mask)
            if counters[d] < _MAX_COUNT:
                counters[d] += 1
        self.samples += 1
        if self.samples >= self.sample_size:
            self.halve()

    def estimate(self, key: Hashable) -> int:
        """The estimated number of accesses of ``key`` in the recent sample: the doorkeeper's one plus the
        least of its counters (collisions only raise it; the cap and the halvings lower it)."""
        h, g = _mixed(key)
        mask, counters, w, door, dmask = self._mask, self._counters, self.width, self._door, self._door_mask
        count = min(counters[h & mask], counters[w + ((h >> 32) & mask)], counters[2 * w + (g & mask)],
                    counters[3 * w + ((g >> 32) & mask)])
        return count + 1 if door[(h >> 16) & dmask] and door[(g >> 8) & dmask] else count

    def counted(self) -> int:
        """The sum of every counter of every row: the accesses past the doorkeeper, ``depth`` each, less what the
        cap and the halvings took (for reading how full the sketch is)."""
        return int(np.frombuffer(self._counters, dtype=np.uint8).sum())

    def halve(self) -> None:
        """Age the sketch: every counter halves and the doorkeeper forgets."""
        counters = np.frombuffer(self._counters, dtype=np.uint8)
        counters >>= 1
        np.frombuffer(self._door, dtype=np.uint8)[:] = 0
        self.samples = 0


class WindowClimber:
    """The share of a cache that new groups enter without admission (the *window*), tuned online by hill climbing
    as Caffeine does: after each sample of requests the share moves by a step in the direction that raised the
    hit ratio of the sample over the previous one (and turns back if it fell); the step shrinks by ``decay``
    each time and starts again at ``step`` when the hit ratio jumps by ``restart`` or more (the workload
    changed).  The share stays in [0, ``most``]."""

    def __init__(self, start: float = 0.01, step: float = 0.0625, decay: float = 0.98, restart: float = 0.05,
                 most: float = 1.0):
        self.share = start
        self.initial_step = step
        self.step = step
        self.decay = decay
        self.restart = restart
        self.most = most
        self.previous = 0.0

    def adjust(self, hit_ratio: float) -> float:
        """Take the hit ratio of the last sample; return the new window share."""
        delta = hit_ratio - self.previous
        amount = self.step if delta >= 0 else -self.step
        if abs(delta) >= self.restart:
            self.step = self.initial_step if amount >= 0 else -self.initial_step
        else:
            self.step = self.decay * amount
        self.previous = hit_ratio
        self.share = min(max(self.share + amount, 0.0), self.most)
        return self.share


class TinyLFUAdmission:
    """Admit a candidate group only if it is estimated more frequent than the group of every victim.

    One instance per cache (or per coordinator): :meth:`record` every access of a group, :meth:`admit` before
    a candidate displaces anything.  ``window`` is the share of the cache that new groups enter without being
    asked (W-TinyLFU's window); with ``adaptive`` a :class:`WindowClimber` moves it online.
    """

    name = "tinylfu"

    def __init__(self, width: int = 1024, sample_factor: int = 10, window: float = 0.5, adaptive: bool = True,
                 climb_factor: float = 1.0, step: float = 0.1):
        self.sketch = FrequencySketch(width, sample_factor)
        self.record = self.sketch.increment  # the hot path: one bound method, no extra call
        self.frequency = self.sketch.estimate
        self.window = window
        self.climber = WindowClimber(window, step) if adaptive else None
        self.climb_factor = climb_factor

    def admit(self, candidate: Hashable, victims: Iterable[Hashable]) -> bool:
        """True if ``candidate`` beats every group of ``victims`` (its own group excepted)."""
        frequency = self.frequency
        mine = frequency(candidate)
        return all(mine > frequency(victim) for victim in victims if victim != candidate)

    def ensure_width(self, groups: int) -> None:
        self.sketch.ensure_width(groups)

    def sampled(self, hit_ratio: float) -> float:
        """The hit ratio of the last sample of requests (:attr:`sample_size` of them): adapt and return the window
        share."""
        if self.climber is not None:
            self.window = self.climber.adjust(hit_ratio)
        return self.window

    @property
    def sample_size(self) -> int:
        """Requests per sample of the window's hill climbing: ``climb_factor`` times the sketch's width."""
        return max(64, int(self.climb_factor * self.sketch.width))


def make_admission(name: str, width: int = 1024) -> TinyLFUAdmission | None:
    """The admission policy called ``name`` (:data:`ADMISSIONS`); None for ``"none"``."""
    if name == "none":
        return None
    if name == "tinylfu":
        return TinyLFUAdmission(width)
    raise ValueError(f"admission must be one of {', '.join(ADMISSIONS)}, not {name!r}")

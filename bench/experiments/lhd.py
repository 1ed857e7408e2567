"""LHD's hit density as a cache's only rule: a research prototype, byte hit ratio (not HTDA's code).

    python bench/experiments/lhd.py TRACE 10,20,50     # sizes in % of the trace's footprint

N. Beckmann, H. Chen, A. Cidon, "LHD: Improving Cache Hit Rate by Maximizing
Hit Density", NSDI'18.  Each object has a class (the sum of its last two
reuse ages, in log2 steps; objects never reused are a class of their own)
and an age (requests since its last access, in coarse units).  Decayed
histograms of hits and evictions per class and age give the expected hits
per unit of space and time of keeping an object of that class at that age
(for byte hits the size cancels); the cache evicts the lowest of 64 cached
objects drawn at random.  ``docs/simulator-history.rst``, *Hit density*,
has what it gave.
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.experiments.prototype import SampledContents, main  # noqa: E402

AGES = 4096
CLASSES = 16
NEVER_REUSED = CLASSES - 1
SAMPLES = 64
DECAY = 0.9
#: the histogram's ages span this many cache-fulls of requests
SPAN = 10


class HitDensityCache:
    """A cache of ``capacity`` bytes over objects numbered 0 .. ``objects`` - 1, evicting by LHD's hit density."""

    def __init__(self, capacity: int, objects: int, seed: int = 0):
        self.capacity, self.now = capacity, 0
        self.random = random.Random(seed)
        self.contents = SampledContents(objects)
        self.last = np.zeros(objects, np.int64)  # request number of the last access, 0: never accessed
        self.reuse = np.zeros((objects, 2), np.int64)  # the last two reuse ages, coarse (0: none)
        self.hits = np.zeros((CLASSES, AGES))
        self.evictions = np.zeros((CLASSES, AGES))
        self.density = np.tile(1.0 / (np.arange(AGES) + 1.0), (CLASSES, 1))  # LRU's order until it has learnt
        self.unit = 0  # requests per age step, fixed once the cache is nearly full
        self.next_reconfiguration = 0

    def request(self, oid: int, size: int) -> bool:
        """One request; True on a hit."""
        self.now += 1
        unit = self.unit or max(1, SPAN * max(1, len(self.contents.cached)) // AGES)
        hit = self.contents.holds(oid)
        if hit:
            self.hits[self.klass(oid), self.age(oid, unit)] += 1
        if self.last[oid]:
            self.reuse[oid] = (max(1, self.age(oid, unit)), self.reuse[oid, 0])
        self.last[oid] = self.now
        if not hit and size <= self.capacity:
            while self.contents.used + size > self.capacity:
                self.evict(unit)
            self.contents.add(oid, size)
        self.learn()
        return hit

    def klass(self, oid: int) -> int:
        ages = int(self.reuse[oid].sum())
        return NEVER_REUSED if ages == 0 else min(CLASSES - 2, int(math.log2(ages)))

    def age(self, oid: int, unit: int) -> int:
        return min(AGES - 1, int(self.now - self.last[oid]) // unit)

    def evict(self, unit: int) -> None:
        cached = self.contents.cached
        drawn = [self.random.randrange(len(cached)) for _ in range(min(SAMPLES, len(cached)))]
        lowest = min(drawn, key=lambda i: self.density[self.klass(cached[i]), self.age(cached[i], unit)])
        oid = cached[lowest]
        self.evictions[self.klass(oid), self.age(oid, unit)] += 1
        self.contents.remove(oid)

    def learn(self) -> None:
        """Fix the age's unit once the cache is nearly full; then, every cache-full of requests, the densities."""
        if not self.unit:
            if self.contents.used >= 0.9 * self.capacity and self.contents.cached:
                self.unit = max(1, SPAN * len(self.contents.cached) // AGES)
                self.next_reconfiguration = self.now + max(1024, len(self.contents.cached))
            return
        if self.now < self.next_reconfiguration:
            return
        # from the oldest age down: the hits still to come over the space-time still to be spent, per class
        hits = self.hits[:, ::-1].cumsum(axis=1)
        lifetime = (self.hits + self.evictions)[:, ::-1].cumsum(axis=1).cumsum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.density = np.where(lifetime > 0, hits / lifetime, 0.0)[:, ::-1]
        self.hits *= DECAY
        self.evictions *= DECAY
        self.next_reconfiguration = self.now + max(1024, len(self.contents.cached))


if __name__ == "__main__":
    main(HitDensityCache)

"""A learned next-access time as a cache's only rule (LRB's idea, simplified): a research prototype, byte hit
ratio (not HTDA's code).  Needs ``pip install lightgbm``, which HTDA itself does not.

    python bench/experiments/lrb.py TRACE 10,20,50     # sizes in % of the trace's footprint

Z. Song, D. S. Berger, K. Li, W. Lloyd, "Learning Relaxed Belady for Content
Distribution Network Caching", NSDI'20.  Belady evicts the object read again
last; LRB learns to predict when an object will be read again from what its
past looks like, and evicts, of 64 cached objects drawn at random, the one
predicted furthest (for byte hits the size cancels: a byte kept earns a hit
per unit of time in proportion to how soon it is read).  What an object's
past looks like: the gaps between its last eight reads, the time since the
latest, its size, how many reads it had, and four decayed counts of them
(half-lives of 2^7 to 2^16 requests).  Time is the request number.

The model (gradient-boosted trees, LightGBM) learns from snapshots: every
``SNAPSHOT_EVERY`` requests the features of ``SNAPSHOTS`` cached objects drawn at
random, labelled with the requests until the object's next read, or with
twice the horizon when it is not read within it (the horizon: sixteen
times the mean age of the objects evicted lately, as LRB's memory window
is several turnovers of the cache; four did worse).  It is trained again each time
``TRAIN_EVERY`` new labels have come, on the latest ``KEEP`` of them.
Until the first model the cache evicts the oldest of the objects drawn
(LRU, sampled).  ``docs/simulator-history.rst``, *A learned next read*,
has what it gave.
"""

from __future__ import annotations

import math
import random
import sys
from collections import deque
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from bench.experiments.prototype import SampledContents, main  # noqa: E402

SAMPLES = 64
GAPS = 8
HALF_LIVES = (2.0**7, 2.0**10, 2.0**13, 2.0**16)
FEATURES = GAPS + 2 + len(HALF_LIVES) + 1  # the gaps, the time since the latest read, log2 size, the counts, reads
SNAPSHOT_EVERY = 1
SNAPSHOTS = 1
TRAIN_EVERY = 5_000
KEEP = 100_000
FIRST_TRAINING = 1_000
#: a snapshot not read again within this many times the mean age of the evicted objects is labelled twice that
HORIZON = 16.0


class LearnedCache:
    """A cache of ``capacity`` bytes over objects numbered 0 .. ``objects`` - 1, evicting the object predicted to
    be read again last."""

    def __init__(self, capacity: int, objects: int, seed: int = 0):
        import lightgbm  # noqa: PLC0415 - a prototype's own dependency, not HTDA's

        self.lightgbm = lightgbm
        self.capacity, self.now = capacity, 0
        self.random = random.Random(seed)
        self.reads = np.zeros((objects, GAPS + 1), np.float64)  # the latest reads' request numbers, newest first
        self.count = np.zeros(objects, np.int64)
        self.decayed = np.zeros((objects, len(HALF_LIVES)), np.float64)  # decayed read counts as of `reads[:, 0]`
        self.contents = SampledContents(objects)
        # snapshots: (features, taken at, horizon), None once labelled; by object, and in the order taken
        self.taken: list[tuple[np.ndarray, float, float] | None] = []
        self.waiting: dict[int, list[int]] = {}
        self.pending: deque[int] = deque()
        self.rows: deque[np.ndarray] = deque(maxlen=KEEP)
        self.labels: deque[float] = deque(maxlen=KEEP)
        self.new_labels = 0
        self.model = None
        self.eviction_age = 0.0  # the mean age of the objects evicted lately (decayed)

    def request(self, oid: int, size: int) -> bool:
        """One request; True on a hit."""
        self.now += 1
        self.label_read(oid)
        hit = self.contents.holds(oid)
        self.note_read(oid)
        if not hit and size <= self.capacity:
            while self.contents.used + size > self.capacity:
                self.evict()
            self.contents.add(oid, size)
        if self.now % SNAPSHOT_EVERY == 0 and self.contents.cached and self.eviction_age:
            self.snapshot()
        self.label_expired()
        if self.new_labels >= (TRAIN_EVERY if self.model is not None else FIRST_TRAINING):
            self.train()
        return hit

    def note_read(self, oid: int) -> None:
        last = self.reads[oid, 0]
        if self.count[oid]:
            factors = np.exp2(-(self.now - last) / np.array(HALF_LIVES))
            self.decayed[oid] = self.decayed[oid] * factors + 1.0
        else:
            self.decayed[oid] = 1.0
        self.reads[oid, 1:] = self.reads[oid, :-1]
        self.reads[oid, 0] = self.now
        self.count[oid] += 1

    def features(self, oids: list[int]) -> np.ndarray:
        """Each object's past as seen now (NaN where it had fewer reads than a gap needs)."""
        ids = np.asarray(oids)
        reads = self.reads[ids]
        count = self.count[ids]
        out = np.full((len(ids), FEATURES), np.nan)
        out[:, 0] = self.now - reads[:, 0]
        gaps = reads[:, :-1] - reads[:, 1:]
        have = np.arange(1, GAPS + 1)[None, :] < count[:, None]
        out[:, 1:GAPS + 1] = np.where(have, gaps, np.nan)
        out[:, GAPS + 1] = np.log2(np.maximum(self.contents.size[ids], 1))
        factors = np.exp2(-(self.now - reads[:, :1]) / np.array(HALF_LIVES)[None, :])
        out[:, GAPS + 2:GAPS + 2 + len(HALF_LIVES)] = self.decayed[ids] * factors
        out[:, -1] = count
        return out

    def evict(self) -> None:
        cached = self.contents.cached
        drawn = list({self.random.randrange(len(cached)) for _ in range(min(SAMPLES, len(cached)))})
        oids = [cached[i] for i in drawn]
        rows = self.features(oids)
        if self.model is None:
            order = np.argsort(-rows[:, 0])  # the oldest first
        else:
            order = np.argsort(-self.model.predict(rows))  # the furthest predicted read first
        for i in order:
            oid = oids[i]
            if not self.contents.holds(oid):
                continue
            age = self.now - self.reads[oid, 0]
            self.eviction_age = age if not self.eviction_age else 0.99 * self.eviction_age + 0.01 * age
            self.contents.remove(oid)
            return

    def snapshot(self) -> None:
        horizon = HORIZON * self.eviction_age
        for _ in range(SNAPSHOTS):
            oid = self.contents.cached[self.random.randrange(len(self.contents.cached))]
            self.waiting.setdefault(oid, []).append(len(self.taken))
            self.pending.append(len(self.taken))
            self.taken.append((self.features([oid])[0], float(self.now), horizon))

    def label_read(self, oid: int) -> None:
        for index in self.waiting.pop(oid, ()):
            taken = self.taken[index]
            if taken is not None:
                self.learn(taken[0], self.now - taken[1])
                self.taken[index] = None

    def label_expired(self) -> None:
        """Snapshots whose object was not read within their horizon: labelled twice the horizon, as LRB does."""
        while self.pending:
            taken = self.taken[self.pending[0]]
            if taken is not None:
                if self.now - taken[1] <= taken[2]:
                    return
                self.learn(taken[0], 2.0 * taken[2])
                self.taken[self.pending[0]] = None
            self.pending.popleft()

    def learn(self, row: np.ndarray, until: float) -> None:
        self.rows.append(row)
        self.labels.append(math.log1p(until))
        self.new_labels += 1

    def train(self) -> None:
        data = self.lightgbm.Dataset(np.array(self.rows), label=np.array(self.labels))
        params = {"objective": "regression", "num_leaves": 32, "learning_rate": 0.1, "verbose": -1,
                  "num_threads": 1, "seed": 0}
        self.model = self.lightgbm.train(params, data, num_boost_round=32)
        self.new_labels = 0


if __name__ == "__main__":
    main(LearnedCache)

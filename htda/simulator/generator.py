"""A synthetic trace that mimics analysis workloads, for tests, docs and benchmarks.

The model (all draws from one seeded numpy generator, so a seed gives the same
trace on every machine):

- *Datasets* are groups of files of 20–200 MB each.  A fixed number of
  datasets is *live* at any time; every ``turnover`` passes a new dataset
  replaces the oldest live one (new data supersedes old).
- Popularity is Zipf-like over a ranking of the live datasets; a new dataset
  takes a random place in the ranking.
- Several *analysts* run at once.  Each one makes passes over a dataset,
  reading its files in order in jobs of a few files (one timestamp per job);
  after a pass it repeats the same dataset with probability ``repeat`` or
  picks a new one by popularity.  Analysts interleave job by job.

The group of every request is its dataset.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import DEFAULT_CHUNK

if TYPE_CHECKING:  # numpy is imported where the trace is made, not to read the parameters (htda --help)
    import numpy as np

    from .trace import Chunk

__all__ = ["AnalysisWorkload", "MB"]

MB = 1_000_000
_BLOCK = 4096  # random draws are made in blocks: one numpy call per block, not per job


@dataclass
class AnalysisWorkload:
    """Parameters of the synthetic analysis workload; iterate :meth:`chunks` to get the trace."""

    requests: int = 200_000
    seed: int = 1
    live_datasets: int = 40
    files_per_dataset: tuple[int, int] = (10, 100)
    file_size: tuple[int, int] = (20 * MB, 200 * MB)
    analysts: int = 8
    zipf: float = 1.0
    repeat: float = 0.5
    turnover: int = 20
    files_per_job: tuple[int, int] = (1, 10)
    mean_job_interval: float = 10.0
    chunk_size: int = DEFAULT_CHUNK

    has_groups = True

    def __post_init__(self) -> None:
        if self.requests < 0 or self.live_datasets < 1 or self.analysts < 1 or self.turnover < 1:
            raise ValueError("requests >= 0, live_datasets >= 1, analysts >= 1 and turnover >= 1 are required")
        if not (math.isfinite(self.zipf) and self.zipf >= 0) or self.seed < 0:
            raise ValueError("zipf must be a finite exponent >= 0 and seed an integer >= 0")
        if not (1 <= self.files_per_dataset[0] <= self.files_per_dataset[1]):
            raise ValueError("files_per_dataset must be (low, high) with 1 <= low <= high")
        if not (0 < self.file_size[0] <= self.file_size[1]):
            raise ValueError("file_size must be (low, high) with 0 < low <= high")

    # -- the trace -----------------------------------------------------------
    def chunks(self) -> Iterator[Chunk]:
        """The requests as chunks of at most ``chunk_size``."""
        return self._chunks_of(_State(self))

    __iter__ = chunks

    def _chunks_of(self, state: _State) -> Iterator[Chunk]:
        emitted = 0
        while emitted < self.requests:
            chunk = state.next_chunk(min(self.chunk_size, self.requests - emitted))
            emitted += len(chunk)
            yield chunk

    def _final_state(self) -> _State:
        state = _State(self)
        for _ in self._chunks_of(state):
            pass
        return state

    def working_set_bytes(self) -> int:
        """Mean bytes of ``live_datasets`` datasets: the working set cache sizes are compared with."""
        state = self._final_state()
        total = sum(state.sizes[f] for files in state.datasets for f in files)
        return int(total / len(state.datasets) * self.live_datasets)

    def footprint_bytes(self) -> int:
        """Bytes of the distinct objects the trace requests (what ``htda simulate`` measures percentages by)."""
        from .trace import footprint_bytes

        return footprint_bytes(self.chunks())

    def object_sizes(self) -> np.ndarray:
        """Size of every object id of the trace (replays the generator)."""
        import numpy as np

        return np.asarray(self._final_state().sizes, dtype=np.int64)

    @staticmethod
    def object_name(dataset: int, index: int) -> str:
        return f"/store/sim/ds{dataset:05d}/file{index:04d}.root"

    @staticmethod
    def group_name(dataset: int) -> str:
        return f"/store/sim/ds{dataset:05d}"

    def rows(self) -> Iterator[tuple[float, str, int, str]]:
        """The trace as CSV rows ``(timestamp, object_id, size_bytes, group_id)``."""
        state = _State(self)
        for chunk in self._chunks_of(state):
            for t, oid, size, group in zip(chunk.times.tolist(), chunk.ids.tolist(), chunk.sizes.tolist(),
                                           chunk.groups.tolist()):
                dataset, index = state.file_names[oid]
                yield t, self.object_name(dataset, index), size, self.group_name(group)


class _State:
    """The generator's moving parts: live datasets, analysts' passes, clock."""

    def __init__(self, w: AnalysisWorkload):
        self.w = w
        import numpy as np

        self.rng = np.random.default_rng(w.seed)
        self.sizes: list[int] = []  # per object id
        self.file_names: list[tuple[int, int]] = []  # per object id: (dataset, index)
        self.datasets: list[range] = []  # object ids of each dataset
        self.ranking: list[int] = []  # live datasets, most popular first
        self.cumulative = list(itertools.accumulate(1.0 / (r + 1) ** w.zipf for r in range(w.live_datasets)))
        for _ in range(w.live_datasets):
            self.ranking.insert(self._uniform_int(0, len(self.ranking)), self._new_dataset())
        self.passes = 0
        self.clock = 0.0
        self.analysts = [self._start_pass(None) for _ in range(w.analysts)]  # [dataset, position]
        self._draws: Iterator[tuple[int, int, float]] = iter(())

    def _uniform_int(self, low: int, high: int) -> int:
        return int(self.rng.integers(low, high + 1))

    def _new_dataset(self) -> int:
        w, d = self.w, len(self.datasets)
        n = self._uniform_int(*w.files_per_dataset)
        first = len(self.sizes)
        self.sizes.extend(self.rng.integers(w.file_size[0], w.file_size[1] + 1, size=n).tolist())
        self.file_names.extend((d, i) for i in range(n))
        self.datasets.append(range(first, first + n))
        return d

    def _popular_dataset(self) -> int:
        u = float(self.rng.random()) * self.cumulative[-1]
        return self.ranking[min(bisect.bisect_left(self.cumulative, u), len(self.ranking) - 1)]

    def _start_pass(self, previous: int | None) -> list[int]:
        self.passes += 1
        if self.passes % self.w.turnover == 0:
            oldest = min(self.ranking)
            self.ranking.remove(oldest)
            self.ranking.insert(self._uniform_int(0, len(self.ranking)), self._new_dataset())
        if previous is not None and previous in self.ranking and self.rng.random() < self.w.repeat:
            return [previous, 0]
        return [self._popular_dataset(), 0]

    def _next_draw(self) -> tuple[int, int, float]:
        try:
            return next(self._draws)
        except StopIteration:
            w, rng = self.w, self.rng
            who = rng.integers(0, w.analysts, size=_BLOCK).tolist()
            files = rng.integers(w.files_per_job[0], w.files_per_job[1] + 1, size=_BLOCK).tolist()
            gaps = rng.exponential(w.mean_job_interval, size=_BLOCK).tolist()
            self._draws = iter(zip(who, files, gaps))
            return next(self._draws)

    def next_chunk(self, n: int) -> Chunk:
        times: list[float] = []
        ids: list[int] = []
        groups: list[int] = []
        while len(ids) < n:
            who, k, gap = self._next_draw()
            self.clock += gap
            current = self.analysts[who]
            dataset, position = current
            files = self.datasets[dataset]
            stop = min(position + k, len(files), position + n - len(ids))
            ids.extend(files[position:stop])
            times.extend([self.clock] * (stop - position))
            groups.extend([dataset] * (stop - position))
            current[1] = stop
            if stop == len(files):
                self.analysts[who] = self._start_pass(dataset)
        sizes = self.sizes
        from .trace import Chunk

        return Chunk.from_lists(times, ids, [sizes[i] for i in ids], groups)

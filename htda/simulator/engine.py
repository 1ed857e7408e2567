"""The replay engine: one pass over a trace feeds every policy of a run (or, when the trace can be read again
fast, each policy replays it in turn), then the offline bounds.

Online policies see the trace chunk by chunk, so memory does not grow with
its length.  The offline policies need each request's next use, so the
engine keeps the object id of every request (4 bytes each, in a numpy
array) and replays them after the online pass.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, cast

import numpy as np

from .forked import FORK, kill_all, reap, received, send_outcome, start_process
from .offline import BeladyPolicy, pfoo_lower_bound
from .policies import CachePolicy
from .trace import Chunk, record_sizes

__all__ = ["PolicyResult", "Progress", "ReplayResult", "replay", "windows_of"]


@dataclass
class PolicyResult:
    """What one policy (or bound) achieved at one cache size."""

    label: str
    capacity: int
    hits: float = 0.0
    hit_bytes: float = 0.0
    staged: int = 0
    evicted: int = 0
    seconds: float = 0.0  # wall-clock time spent in this policy
    cpu_seconds: float = 0.0  # CPU time of the replaying thread: the speed that does not depend on machine load
    bound: bool = False  # an upper bound (PFOO-L), not a policy
    hits_series: list[float] = field(default_factory=list)  # per window
    hit_bytes_series: list[float] = field(default_factory=list)


@dataclass
class ReplayResult:
    """Totals of a replay, the per-window request counts and every policy's result."""

    requests: int = 0
    bytes: int = 0
    objects: int = 0
    footprint_bytes: int = 0
    requests_series: list[int] = field(default_factory=list)
    bytes_series: list[int] = field(default_factory=list)
    start_series: list[float] = field(default_factory=list)  # trace time of each window's first request
    results: list[PolicyResult] = field(default_factory=list)

    def hit_ratio(self, r: PolicyResult) -> float:
        return r.hits / self.requests if self.requests else 0.0

    def byte_hit_ratio(self, r: PolicyResult) -> float:
        return r.hit_bytes / self.bytes if self.bytes else 0.0

    def fetched(self, r: PolicyResult) -> float:
        """Bytes read from storage: every miss (the staged copy is written from the same read)."""
        return self.bytes - r.hit_bytes


class Progress:
    """A one-line progress bar on stderr (only when enabled: a tty or ``--progress``)."""

    def __init__(self, total: float, unit: str = "requests", enabled: bool | None = None, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.total = total
        self.unit = unit
        self.started = time.monotonic()
        self.last = 0.0

    def __call__(self, done: float, label: str = "") -> None:
        now = time.monotonic()
        if not self.enabled or (now - self.last < 0.2 and done < self.total):
            return
        self.last = now
        fraction = min(1.0, done / self.total) if self.total else 1.0
        bar = "#" * int(30 * fraction)
        self.stream.write(f"\r{label:12.12} [{bar:30}] {100 * fraction:5.1f}% {now - self.started:6.1f}s")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


class _GrowingArray:
    """An append-only numpy array (amortised doubling), for the ids the offline pass needs."""

    def __init__(self, dtype):
        self.data = np.empty(1 << 16, dtype=dtype)
        self.size = 0

    def extend(self, values: np.ndarray) -> None:
        end = self.size + len(values)
        if end > len(self.data):
            grown = np.empty(max(end, 2 * len(self.data)), dtype=self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size:end] = values
        self.size = end

    def view(self) -> np.ndarray:
        return self.data[: self.size]


def windows_of(chunks: Iterable[Chunk], window: int) -> Iterator[Chunk]:
    """The requests of ``chunks`` re-cut into chunks of exactly ``window`` requests (the last may be shorter)."""
    pending: list[Chunk] = []
    count = 0
    for chunk in chunks:
        pending.append(chunk)
        count += len(chunk)
        while count >= window:
            joined = Chunk.joined(pending)
            yield joined.part(0, window)
            rest = joined.part(window, len(joined))
            pending, count = ([rest] if len(rest) else []), len(rest)
    if count:
        yield Chunk.joined(pending)


def replay(chunks: Iterable[Chunk] | Callable[[], Iterable[Chunk]], policies: Sequence[CachePolicy],
           offline: Sequence[BeladyPolicy] = (), bound_capacities: Sequence[int] = (),
           progress: Callable[[float, str], None] | None = None, window: int | None = None,
           release: bool = False, jobs: int = 1) -> ReplayResult:
    """Replay ``chunks`` through ``policies``; then the ``offline`` policies and the PFOO-L bound at each of
    ``bound_capacities``.  The time series have one entry per ``window`` requests (per chunk if None).

    ``chunks`` is the trace's chunks, which every policy replays in turn chunk by chunk, or a function giving them
    again as often as asked: then each policy replays the whole trace before the next one starts, so that its
    tables stay in the CPU's caches instead of being evicted by the other policies' at every chunk (the same
    hits; a policy's measured speed is its own, and the run is faster).  With ``release`` (for a caller that
    does not look into the policies afterwards) each policy's tables are dropped once its totals are taken
    (:meth:`~.policies.CachePolicy.release`): replayed in turn, a run then holds one policy's tables at a time.

    ``jobs`` > 1 (with ``release`` and chunks given as a function) replays the policies in that many processes
    forked from this one, each policy whole in one of them, while this one runs the offline passes: the same
    results (each policy's own CPU time included) sooner, holding up to ``jobs`` policies' tables at once."""
    again, first_pass = (chunks, chunks()) if callable(chunks) else (None, chunks)
    forked = jobs > 1 and release and again is not None and len(policies) > 1

    def windowed(pass_: Iterable[Chunk]) -> Iterable[Chunk]:
        return pass_ if window is None else windows_of(pass_, window)

    result = ReplayResult()
    online = [PolicyResult(p.label, p.capacity) for p in policies]
    keep_ids = bool(offline or bound_capacities)
    ids_seen = _GrowingArray(np.int32 if keep_ids else np.int64)
    object_sizes = np.zeros(0, dtype=np.int64)
    for chunk in windowed(first_pass):
        if not len(chunk):
            continue
        if again is None:
            _feed(chunk, policies, online)
        requested = int(chunk.sizes.sum())
        result.requests += len(chunk)
        result.bytes += requested
        result.requests_series.append(len(chunk))
        result.bytes_series.append(requested)
        result.start_series.append(float(chunk.times[0]))
        object_sizes = record_sizes(object_sizes, chunk)
        if keep_ids:
            ids_seen.extend(chunk.ids)
        if progress is not None:
            progress(result.requests, "online" if again is None else "reading")
    seen = object_sizes > -1
    result.objects = int(np.count_nonzero(seen))
    result.footprint_bytes = int(object_sizes[seen].sum())
    # each policy alone over the whole trace again, or (None) already fed in the first pass
    alone = None if again is None else lambda: windowed(again())
    if forked:
        assert alone is not None  # (forked)
        pending = _fork_replays(policies, online, alone, jobs,
                                progress and (lambda done, n: progress(result.requests * done / n, "policies")))
    else:
        for policy, res in zip(policies, online):
            _finish_alone(policy, res, alone, progress, release)
    bounds = []
    if keep_ids:
        bounds = _offline(result, ids_seen.view(), object_sizes, offline, bound_capacities, progress)
    if forked:
        online = pending()
    result.results.extend(online)
    result.results.extend(bounds)
    return result


def _finish_alone(policy: CachePolicy, res: PolicyResult, chunks: Callable[[], Iterable[Chunk]] | None,
                  progress: Callable[[float, str], None] | None, release: bool) -> None:
    """``policy`` alone over ``chunks()`` (None: it was fed already), then its totals into ``res``."""
    if chunks is not None:
        done = 0
        for chunk in chunks():
            if len(chunk):
                _feed(chunk, [policy], [res])
                done += len(chunk)
                if progress is not None:
                    progress(done, policy.label)
    policy.finish()
    res.staged, res.evicted = policy.staged, policy.evicted
    if release:
        policy.release()


def _fork_replays(policies: Sequence[CachePolicy], online: list[PolicyResult], chunks: Callable[[], Iterable[Chunk]],
                  jobs: int, progress: Callable[[int, int], None] | None) -> Callable[[], list[PolicyResult]]:
    """Start replaying each policy alone in ``jobs`` forked processes; returns the function that waits for them
    (``progress(policies done, policies)`` as each ends) and gives the results in the policies' order.
    Each process takes the next policy not yet taken (a shared counter) until none is left, so that a slow
    policy holds up one process, not the others' share; the parent is free meanwhile (the offline passes).  The
    first error, in a policy or a process that died, kills the processes still replaying."""
    taken = FORK.Value("l", 0)  # the next policy to take, under its lock
    running: dict[Connection, BaseProcess] = dict(  # each process's end of its pipe -> the process
        start_process(_replay_taken, (taken, policies, online, chunks), f"htda replay {n}", daemon=True)
        for n in range(min(jobs, len(policies))))

    def results() -> list[PolicyResult]:
        done: dict[int, PolicyResult] = {}
        try:
            while running:
                for ready in wait(list(running)):
                    reader = cast(Connection, ready)  # (wait gives back the readers it was given)
                    replayed = received(reader, "policies (--jobs)")
                    if replayed is None:  # (that process found no policy left)
                        reap(reader, running.pop(reader))
                        continue
                    i, res = replayed
                    done[i] = res
                    if progress is not None:
                        progress(len(done), len(policies))
        finally:
            kill_all(running.items())
        for policy in policies:
            policy.release()  # (this process's copies were never replayed: nothing to drop but their tables)
        return [done[i] for i in range(len(policies))]
    return results


def _replay_taken(writer: Connection, taken: Any, policies: Sequence[CachePolicy], online: Sequence[PolicyResult],
                  chunks: Callable[[], Iterable[Chunk]]) -> None:
    """In a forked process: replay the next policy not yet taken, send (its index, its result), and again;
    None when none is left.  An error is sent instead, and ends the process."""
    while True:
        with taken.get_lock():
            i = taken.value
            taken.value += 1
        if i >= len(policies):
            send_outcome(writer, lambda: None, "policies (--jobs)")
            return

        def replay_it(i: int = i) -> tuple[int, PolicyResult]:
            _finish_alone(policies[i], online[i], chunks, None, True)
            return i, online[i]

        if send_outcome(writer, replay_it, f"replaying {policies[i].label}"):
            return


def _feed(chunk: Chunk, policies: Sequence[CachePolicy], results: Sequence[PolicyResult]) -> None:
    """One chunk through each of ``policies`` in turn, timed, its hits added to ``results``."""
    arrays = (chunk.times, chunk.ids, chunk.sizes, chunk.groups)
    lists = None if all(p.takes_arrays for p in policies) else tuple(column.tolist() for column in arrays)
    for policy, res in zip(policies, results):
        started, cpu_started = time.perf_counter(), time.thread_time()
        hits, hit_bytes = policy.replay(*(arrays if policy.takes_arrays or lists is None else lists))
        res.seconds += time.perf_counter() - started
        res.cpu_seconds += time.thread_time() - cpu_started
        _add(res, hits, hit_bytes)


def _add(res: PolicyResult, hits: float, hit_bytes: float) -> None:
    res.hits += hits
    res.hit_bytes += hit_bytes
    res.hits_series.append(hits)
    res.hit_bytes_series.append(hit_bytes)


def _offline(result: ReplayResult, ids: np.ndarray, object_sizes: np.ndarray, offline: Sequence[BeladyPolicy],
             bound_capacities: Sequence[int], progress) -> list[PolicyResult]:
    from .offline import next_uses

    nexts = next_uses(ids)
    out = []
    windows = np.cumsum([0] + result.requests_series)
    for policy in offline:
        res = PolicyResult(policy.label, policy.capacity)
        started, cpu_started = time.perf_counter(), time.thread_time()
        for start, stop in zip(windows[:-1], windows[1:]):
            window_ids = ids[start:stop]
            hits, hit_bytes = policy.replay_future(window_ids.tolist(), object_sizes[window_ids].tolist(),
                                                   nexts[start:stop].tolist())
            _add(res, hits, hit_bytes)
            if progress is not None:
                progress(stop, policy.label)
        res.seconds = time.perf_counter() - started
        res.cpu_seconds = time.thread_time() - cpu_started
        res.staged, res.evicted = policy.staged, policy.evicted
        out.append(res)
    if bound_capacities:
        window = result.requests_series[0] if result.requests_series else 1
        for bound in pfoo_lower_bound(ids, _SizesByRequest(ids, object_sizes), list(bound_capacities), nexts, window):
            res = PolicyResult("pfoo-l", bound.capacity, bound.hits, bound.hit_bytes, bound=True)
            res.hit_bytes_series = _regroup(bound.hit_bytes_series, result.requests_series, window)
            out.append(res)
    return out


class _SizesByRequest:
    """``sizes[positions]`` of requests, looked up per object: no per-request size array for the whole trace."""

    def __init__(self, ids: np.ndarray, object_sizes: np.ndarray):
        self.ids, self.object_sizes = ids, object_sizes

    def __getitem__(self, positions: np.ndarray) -> np.ndarray:
        return self.object_sizes[self.ids[positions]]


def _regroup(series: np.ndarray, requests_series: list[int], window: int) -> list[float]:
    """A per-``window`` series as one value per replay window (chunks all have ``window`` requests but the
    last; otherwise the series is only meaningful in total)."""
    values = series.tolist()
    return values[: len(requests_series)] + [0.0] * (len(requests_series) - len(values))
